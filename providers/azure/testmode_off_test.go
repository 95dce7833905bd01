//go:build !azurefake

package main

import (
	"errors"
	"fmt"
	"os/exec"
	"slices"
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/provider"
)

// TestProductionBuildRefusesTestMode configures the provider exactly as
// main does in a build without -tags azurefake.
func TestProductionBuildRefusesTestMode(t *testing.T) {
	p := newProvider(testLogger(t), connectARM, buildFixtureOpener())
	err := p.Configure(t.Context(), "prod", []byte(fmt.Sprintf(`{"subscriptionId": %q, "testFixture": "/tmp/fixture.json"}`, testSub)))
	if !errors.Is(err, provider.ErrInvalidConfig) || !strings.Contains(err.Error(), "-tags azurefake") {
		t.Errorf("Configure with testFixture in a production build: error %v; want ErrInvalidConfig naming the azurefake build tag", err)
	}
	info, err := p.Describe(t.Context())
	if err != nil || strings.Contains(info.Description, "test build") {
		t.Errorf("Describe = %+v, %v; want no mention of a test build", info, err)
	}
}

// TestProductionBuildLinksNoFakes keeps the SDK fakes and fakearm out of
// the plugin binary that ships: only -tags azurefake links them.
func TestProductionBuildLinksNoFakes(t *testing.T) {
	if testing.Short() {
		t.Skip("runs go list")
	}
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatalf("go list -deps: %v", err)
	}
	forbidden := []string{
		"github.com/Azure/azure-sdk-for-go/sdk/azcore/fake",
		"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/compute/armcompute/v8/fake",
		"github.com/Azure/azure-sdk-for-go/sdk/resourcemanager/network/armnetwork/v9/fake",
		"github.com/osm-vm/osm-vm/providers/azure/internal/fakearm",
	}
	for _, pkg := range strings.Fields(string(out)) {
		if slices.ContainsFunc(forbidden, func(f string) bool { return pkg == f || strings.HasPrefix(pkg, f+"/") }) {
			t.Errorf("the production build of osm-provider-azure depends on %s; fakes belong behind -tags azurefake", pkg)
		}
	}
}
