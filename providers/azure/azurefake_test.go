//go:build azurefake

package main

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/provider/providertest"
	"github.com/osm-vm/osm-vm/providers/azure/internal/fakearm"
)

// These tests build the real osm-provider-azure binary, with and without
// -tags azurefake, and drive it over go-plugin as osm-server does. Run
// them with: go test -race -tags azurefake ./providers/azure/

func buildPlugin(t *testing.T, dir string, tags ...string) string {
	t.Helper()
	bin := filepath.Join(dir, "osm-provider-azure")
	args := []string{"build", "-o", bin}
	if len(tags) > 0 {
		args = append(args, "-tags", strings.Join(tags, ","))
	}
	out, err := exec.Command("go", append(args, ".")...).CombinedOutput()
	if err != nil {
		t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, out)
	}
	return bin
}

func TestTestBuildHasTestMode(t *testing.T) {
	if buildFixtureOpener() == nil {
		t.Fatal("buildFixtureOpener() = nil in a -tags azurefake build; want the fakearm opener")
	}
}

func TestPluginBinaries(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the plugin binary")
	}
	testBin := buildPlugin(t, t.TempDir(), "azurefake")
	prodBin := buildPlugin(t, t.TempDir())
	binary := func(path string) func(*testing.T) *exec.Cmd {
		return func(*testing.T) *exec.Cmd { return exec.Command(path) }
	}

	t.Run("Conformance", func(t *testing.T) {
		providertest.Run(t, pluginHarness{layout: layoutUniform, command: binary(testBin)})
	})

	t.Run("FixtureChangesAndHealth", func(t *testing.T) {
		ctx := t.Context()
		path := filepath.Join(t.TempDir(), "fixture.json")
		fx := fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{{
			ResourceGroup: "rg-a", Name: "web", Mode: "Flexible", Tags: tags("web.default", 80),
			Instances: []fakearm.Instance{{Name: "web-1", PrivateIP: "10.0.0.4"}},
		}}}
		if err := writeFixture(path, fx); err != nil {
			t.Fatal(err)
		}
		p := providertest.StartPlugin(t, exec.Command(testBin))
		cfg := fmt.Sprintf(`{"subscriptionId": %q, "testFixture": %q, "pollInterval": "50ms"}`, testSub, path)
		if err := p.Configure(ctx, "e2e", []byte(cfg)); err != nil {
			t.Fatalf("Configure: %v", err)
		}
		info, err := p.Describe(ctx)
		if err != nil || info.Name != "azure" || !strings.Contains(info.Description, "test build") {
			t.Errorf("Describe = %+v, %v; want name azure and a description saying it is a test build", info, err)
		}
		var mu sync.Mutex
		var health []provider.Health
		wctx, cancel := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() {
			done <- p.Watch(wctx, func(ev provider.Event) error {
				if ev.Health != nil {
					mu.Lock()
					health = append(health, *ev.Health)
					mu.Unlock()
				}
				return nil
			})
		}()
		defer func() { cancel(); <-done }()
		lastHealth := func(healthy bool, contains string) func() string {
			return func() string {
				mu.Lock()
				defer mu.Unlock()
				if len(health) == 0 {
					return "no health events"
				}
				h := health[len(health)-1]
				if h.Healthy != healthy || !strings.Contains(h.Message, contains) {
					return fmt.Sprintf("last health %+v", h)
				}
				return ""
			}
		}
		endpoints := func(want string) func() string {
			return func() string {
				got, err := snapshot(ctx, p, false)
				if err != nil {
					return err.Error()
				}
				if s := strings.Join(got["default/web"], ","); s != want {
					return fmt.Sprintf("default/web = %q, want %q", s, want)
				}
				return ""
			}
		}
		waitFor(t, "initial endpoints", endpoints("10.0.0.4:80"))

		fx.ScaleSets[0].Instances = append(fx.ScaleSets[0].Instances, fakearm.Instance{Name: "web-2", PrivateIP: "10.0.0.5"})
		fx.CredentialError = "AADSTS700024: client assertion is not within its valid time range"
		if err := writeFixture(path, fx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "unhealthy over the plugin boundary", lastHealth(false, "AADSTS700024"))
		waitFor(t, "last good endpoints kept", endpoints("10.0.0.4:80"))

		fx.CredentialError = ""
		fx.ARMError = &fakearm.ARMError{Status: 403, Code: "AuthorizationFailed"}
		if err := writeFixture(path, fx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "403 reported", lastHealth(false, "Reader role"))

		fx.ARMError = nil
		if err := writeFixture(path, fx); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "healthy again", lastHealth(true, ""))
		waitFor(t, "scale-out visible", endpoints("10.0.0.4:80,10.0.0.5:80"))

		// A fixture that does not parse is a failed poll like any other.
		if err := os.WriteFile(path+".tmp", []byte(`{"scaleSets": [`), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(path+".tmp", path); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "broken fixture reported", lastHealth(false, "azure test fixture"))
		waitFor(t, "last good endpoints kept", endpoints("10.0.0.4:80,10.0.0.5:80"))
	})

	t.Run("ProductionBinaryRefusesTestMode", func(t *testing.T) {
		p := providertest.StartPlugin(t, exec.Command(prodBin))
		cfg := fmt.Sprintf(`{"subscriptionId": %q, "testFixture": "/tmp/fixture.json"}`, testSub)
		err := p.Configure(t.Context(), "prod", []byte(cfg))
		if !errors.Is(err, provider.ErrInvalidConfig) || !strings.Contains(err.Error(), "-tags azurefake") {
			t.Errorf("Configure error %v; want ErrInvalidConfig naming the azurefake build tag", err)
		}
	})
}
