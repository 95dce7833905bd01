package agent

import (
	"testing"

	"github.com/kardianos/service"
)

// ServiceOptions exposes the kardianos/service options install uses.
func ServiceOptions(*testing.T) service.KeyValue { return serviceOptions("unit") }
