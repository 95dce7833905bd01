package store_test

import (
	"testing"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/storetest"
)

// The contract's conformance suite on Memory (boltstore and consulstore
// run it on theirs).
func TestMemory(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(*testing.T) store.Store { return store.NewMemory() }})
}
