//go:build azurefake && linux

package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/provider/providertest"
)

// TestThroughOSMServer runs the real osm-server with this plugin built in
// its fake-ARM test mode, as an operator's staging setup would, and checks
// that scale sets and their changes appear in the server's API, and that a
// credential failure shows in the provider status while the last good
// endpoints stay.
func TestThroughOSMServer(t *testing.T) {
	bin := t.TempDir()
	for _, b := range []struct{ out, pkg, tags string }{
		{"osm-server", "github.com/osm-vm/osm-vm/cmd/osm-server", ""},
		{"osm-provider-azure", ".", "azurefake"},
	} {
		args := []string{"build", "-o", filepath.Join(bin, b.out)}
		if b.tags != "" {
			args = append(args, "-tags", b.tags)
		}
		if out, err := exec.Command("go", append(args, b.pkg)...).CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", b.pkg, err, out)
		}
	}
	dir := t.TempDir()
	fixture := filepath.Join(dir, "fixture.json")
	writeFixture := func(content string) {
		t.Helper()
		tmp := fixture + ".tmp"
		if err := os.WriteFile(tmp, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, fixture); err != nil {
			t.Fatal(err)
		}
	}
	scaleSet := func(instances string, extra string) string {
		return `{"scaleSets": [{"resourceGroup": "rg-a", "name": "bookstore", "mode": "Uniform",
			"tags": {"osm-service": "bookstore.default", "osm-port": "8080"}, "instances": [` + instances + `]}]` + extra + `}`
	}
	writeFixture(scaleSet(`{"name": "0", "privateIP": "10.1.0.4"}, {"name": "1", "privateIP": "10.1.0.5", "powerState": "deallocated"}`, ""))

	srv := providertest.StartServer(t, filepath.Join(bin, "osm-server"), bin, fmt.Sprintf(`  - name: azure-fake
    plugin: osm-provider-azure
    config: {subscriptionId: 6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b, testFixture: %s, pollInterval: 100ms}
`, fixture))
	endpoints := func() (string, error) {
		eps, err := srv.Endpoints("default/bookstore")
		if err != nil {
			return "", err
		}
		for _, e := range eps {
			if !strings.Contains(e.Labels["azure-resource-id"], "/virtualMachineScaleSets/bookstore") {
				return "", fmt.Errorf("endpoint %s has azure-resource-id %q", e.IP, e.Labels["azure-resource-id"])
			}
		}
		return srv.Addrs("default/bookstore")
	}
	wait := func(what string, cond func() (bool, string)) {
		t.Helper()
		providertest.WaitServer(t, what, 30*time.Second, cond)
	}
	endpointsAre := func(want string) func() (bool, string) {
		return func() (bool, string) {
			got, err := endpoints()
			return err == nil && got == want, fmt.Sprintf("%q (%v)", got, err)
		}
	}

	wait("running instance served, deallocated one left out", endpointsAre("10.1.0.4:8080"))

	writeFixture(scaleSet(`{"name": "0", "privateIP": "10.1.0.4"}, {"name": "1", "privateIP": "10.1.0.5"}, {"name": "2", "privateIP": "10.1.0.6"}`, ""))
	wait("scale-out", endpointsAre("10.1.0.4:8080,10.1.0.5:8080,10.1.0.6:8080"))

	writeFixture(scaleSet(`{"name": "0", "privateIP": "10.1.0.4"}`, `, "credentialError": "AADSTS7000215: invalid client secret"`))
	wait("credential failure in provider status", func() (bool, string) {
		state, lastError, err := srv.ProviderStatus("azure-fake")
		return err == nil && state == "unhealthy" && strings.Contains(lastError, "AADSTS7000215"), fmt.Sprintf("%s %q (%v)", state, lastError, err)
	})
	if got, err := endpoints(); err != nil || got != "10.1.0.4:8080,10.1.0.5:8080,10.1.0.6:8080" {
		t.Errorf("endpoints during the credential failure = %q (%v); want the last good three", got, err)
	}
}
