package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/provider/providertest"
	"github.com/osm-vm/osm-vm/providers/azure/internal/fakearm"
)

// helperEnv makes the test binary serve the provider as a plugin (the
// helper-process pattern): TestMain calls provider.Serve instead of
// running tests. The helper has the test mode, like a -tags azurefake
// build.
const helperEnv = "OSM_AZURE_TEST_PLUGIN"

func TestMain(m *testing.M) {
	if os.Getenv(helperEnv) == "1" {
		log := provider.Logger().With("provider", "azure")
		provider.Serve(newProvider(log, connectARM, fakearm.Open))
		os.Exit(0)
	}
	// The poll interval in these tests is 50ms; the suite's default wait
	// is ample but keeps slow machines (and -race) comfortable.
	providertest.Timeout = 5 * time.Second
	os.Exit(m.Run())
}

// modelHarness runs the conformance suite in-process: the provider reads
// the SDK's fake servers, backed by a fakearm model the backend changes.
type modelHarness struct{ layout layout }

func (h modelHarness) MakeProvider(ctx context.Context, t *testing.T) (provider.Provider, providertest.Backend) {
	m := fakearm.New(testSub, fakearm.Fixture{ResourceGroups: []string{"rg-conformance"}})
	b := newFixtureBackend(h.layout, "rg-conformance", func(fx fakearm.Fixture) error { m.Set(fx); return nil })
	p := startModel(ctx, t, m, `"resourceGroups": ["rg-conformance"]`)
	return p, b
}

func TestConformanceUniformScaleSets(t *testing.T) {
	providertest.Run(t, modelHarness{layoutUniform})
}

func TestConformanceFlexibleScaleSets(t *testing.T) {
	providertest.Run(t, modelHarness{layoutFlexible})
}

func TestConformanceStandaloneVMs(t *testing.T) {
	providertest.Run(t, modelHarness{layoutStandalone})
}

// pluginHarness runs the suite over a real go-plugin subprocess in test
// mode: the backend rewrites the fixture file the plugin re-reads on every
// poll. command returns the plugin command line.
type pluginHarness struct {
	layout  layout
	command func(t *testing.T) *exec.Cmd
}

func (h pluginHarness) MakeProvider(ctx context.Context, t *testing.T) (provider.Provider, providertest.Backend) {
	path := filepath.Join(t.TempDir(), "fixture.json")
	b := newFixtureBackend(h.layout, "rg-conformance", func(fx fakearm.Fixture) error { return writeFixture(path, fx) })
	if err := b.apply(b.fx); err != nil {
		t.Fatalf("write fixture: %v", err)
	}
	p := providertest.StartPlugin(t, h.command(t))
	cfg := fmt.Sprintf(`{"subscriptionId": %q, "testFixture": %q, "pollInterval": "50ms", "resourceGroups": ["rg-conformance"]}`, testSub, path)
	if err := p.Configure(ctx, "conformance", []byte(cfg)); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return p, b
}

func helperCommand(*testing.T) *exec.Cmd {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), helperEnv+"=1")
	return cmd
}

func TestConformancePluginProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts plugin subprocesses")
	}
	providertest.Run(t, pluginHarness{layout: layoutFlexible, command: helperCommand})
}
