//go:build consulintegration && linux

package main

import (
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/provider/providertest"
)

// startServer starts osm-server with one Consul provider instance named
// "consul-dc1" configured by pluginConfig (YAML flow).
func startServer(t testing.TB, bin, pluginConfig string) *providertest.Server {
	t.Helper()
	return providertest.StartServer(t, filepath.Join(bin, "osm-server"), bin,
		"  - name: consul-dc1\n    plugin: osm-provider-consul\n    config: "+pluginConfig+"\n")
}

// TestThroughOSMServer runs the real osm-server with this plugin against a
// real Consul, as an operator would: instances registered with TTL checks
// appear in the server's endpoints API, a check turning critical removes
// its instance, and a Consul outage shows in the provider's status while
// the last good endpoints stay.
func TestThroughOSMServer(t *testing.T) {
	agent := consultest.StartDev(t)
	c := apiClient(t, agent, "")
	register(t, c, instanceSpec{service: "web", id: "web-1", addr: "192.0.2.1", port: 8080}, api.HealthPassing)
	register(t, c, instanceSpec{service: "web", id: "web-2", addr: "192.0.2.2", port: 8080}, api.HealthPassing)
	srv := startServer(t, buildBinaries(t), fmt.Sprintf("{address: %q}", agent.HTTPAddr))

	endpointsAre := func(want string) func() (bool, string) {
		return func() (bool, string) {
			got, err := srv.Addrs("default/web")
			return err == nil && got == want, fmt.Sprintf("%q (%v)", got, err)
		}
	}
	providertest.WaitServer(t, "registered instances served", 30*time.Second, endpointsAre("192.0.2.1:8080,192.0.2.2:8080"))

	setTTL(t, c, "web-1", api.HealthCritical)
	providertest.WaitServer(t, "a critical instance leaves", 30*time.Second, endpointsAre("192.0.2.2:8080"))
	register(t, c, instanceSpec{service: "web", id: "web-3", addr: "192.0.2.3", port: 8080}, api.HealthPassing)
	providertest.WaitServer(t, "a new instance joins", 30*time.Second, endpointsAre("192.0.2.2:8080,192.0.2.3:8080"))

	agent.Stop()
	providertest.WaitServer(t, "Consul down: provider unhealthy with the cause", 30*time.Second, func() (bool, string) {
		state, lastError, err := srv.ProviderStatus("consul-dc1")
		return err == nil && state == "unhealthy" && strings.Contains(lastError, "connection refused"), fmt.Sprintf("%s %q (%v)", state, lastError, err)
	})
	if got, err := srv.Addrs("default/web"); err != nil || got != "192.0.2.2:8080,192.0.2.3:8080" {
		t.Errorf("endpoints while Consul is down = %q (%v); want the last good ones", got, err)
	}
	agent.Restart(t)
	c = apiClient(t, agent, "")
	register(t, c, instanceSpec{service: "web", id: "web-4", addr: "192.0.2.4", port: 8080}, api.HealthPassing)
	providertest.WaitServer(t, "Consul back (empty, then web-4): healthy and current", 30*time.Second, func() (bool, string) {
		state, lastError, err := srv.ProviderStatus("consul-dc1")
		got, gerr := srv.Addrs("default/web")
		return err == nil && gerr == nil && state != "unhealthy" && got == "192.0.2.4:8080", fmt.Sprintf("%s %q %q (%v %v)", state, lastError, got, err, gerr)
	})
}
