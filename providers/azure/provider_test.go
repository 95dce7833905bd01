package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/providers/azure/internal/fakearm"
)

func TestDiscovery(t *testing.T) {
	cases := []struct {
		name   string
		fx     fakearm.Fixture
		config string
		want   map[string][]string
		// problems are substrings the health message must contain.
		problems []string
	}{
		{
			name: "uniform scale set: running instances only, primary NIC's primary IP",
			fx: fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{{
				ResourceGroup: "rg-a", Name: "bookstore", Mode: "Uniform", Tags: tags("bookstore.default", 8080),
				Instances: []fakearm.Instance{
					{Name: "0", PrivateIP: "10.0.0.4"},
					{Name: "1", PrivateIP: "10.0.0.5", SecondaryIP: "10.1.0.5"},
					{Name: "2", PrivateIP: "10.0.0.6", PowerState: "deallocated"},
					{Name: "3", PrivateIP: "10.0.0.7", PowerState: "stopped"},
					{Name: "4", PrivateIP: "10.0.0.8", ProvisioningState: "Failed"},
					{Name: "5", PrivateIP: "10.0.0.9", PowerState: "starting"},
				},
			}}},
			want: map[string][]string{"default/bookstore": {
				"10.0.0.4:8080@Microsoft.Compute/virtualMachineScaleSets/bookstore/virtualMachines/0",
				"10.0.0.5:8080@Microsoft.Compute/virtualMachineScaleSets/bookstore/virtualMachines/1",
			}},
		},
		{
			name: "flexible scale set: VMs filtered by the scale set, then their NICs",
			fx: fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{{
				ResourceGroup: "rg-a", Name: "bookbuyer", Mode: "Flexible", Tags: tags("bookbuyer.shop", 9090),
				Instances: []fakearm.Instance{
					{Name: "bookbuyer_a1", PrivateIP: "10.0.1.4"},
					{Name: "bookbuyer_b2", PrivateIP: "10.0.1.5", SecondaryIP: "10.1.1.5"},
					{Name: "bookbuyer_c3", PrivateIP: "10.0.1.6", PowerState: "deallocated"},
					{Name: "bookbuyer_d4", PrivateIP: "10.0.1.7", ProvisioningState: "Failed"},
				},
			}}},
			want: map[string][]string{"shop/bookbuyer": {
				"10.0.1.4:9090@Microsoft.Compute/virtualMachines/bookbuyer_a1",
				"10.0.1.5:9090@Microsoft.Compute/virtualMachines/bookbuyer_b2",
			}},
		},
		{
			name: "standalone VMs: running ones, instance view per VM",
			fx: fakearm.Fixture{VirtualMachines: []fakearm.VirtualMachine{
				{ResourceGroup: "rg-a", Tags: tags("legacy.default", 443), Instance: fakearm.Instance{Name: "legacy-1", PrivateIP: "10.0.2.4"}},
				{ResourceGroup: "rg-a", Tags: tags("legacy.default", 443), Instance: fakearm.Instance{Name: "legacy-2", PrivateIP: "10.0.2.5", PowerState: "deallocated"}},
				{ResourceGroup: "rg-a", Tags: tags("legacy.default", 443), Instance: fakearm.Instance{Name: "legacy-3", PrivateIP: "10.0.2.6", SecondaryIP: "10.1.2.6"}},
				{ResourceGroup: "rg-a", Instance: fakearm.Instance{Name: "untagged", PrivateIP: "10.0.2.7"}},
			}},
			want: map[string][]string{"default/legacy": {
				"10.0.2.4:443@Microsoft.Compute/virtualMachines/legacy-1",
				"10.0.2.6:443@Microsoft.Compute/virtualMachines/legacy-3",
			}},
		},
		{
			name: "a tagged service with nothing running is known and empty",
			fx: fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{
				{ResourceGroup: "rg-a", Name: "off", Tags: tags("off.default", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.3.4", PowerState: "deallocated"}}},
				{ResourceGroup: "rg-a", Name: "empty", Mode: "Flexible", Tags: tags("empty.default", 80)},
			}},
			want: map[string][]string{"default/off": {}, "default/empty": {}},
		},
		{
			name: "members of a tagged flexible scale set count once; a tagged VM in an untagged one is standalone",
			fx: fakearm.Fixture{
				ScaleSets: []fakearm.ScaleSet{
					{ResourceGroup: "rg-a", Name: "tagged", Mode: "Flexible", Tags: tags("web.default", 80), Instances: []fakearm.Instance{{Name: "web-1", PrivateIP: "10.0.4.4"}}},
					{ResourceGroup: "rg-a", Name: "untagged", Mode: "Flexible", Instances: []fakearm.Instance{{Name: "plain-1", PrivateIP: "10.0.4.5"}}},
				},
				VirtualMachines: []fakearm.VirtualMachine{
					{ResourceGroup: "rg-a", Tags: tags("db.default", 5432), Instance: fakearm.Instance{Name: "db-1", PrivateIP: "10.0.4.6"}},
				},
			},
			want: map[string][]string{
				"default/web": {"10.0.4.4:80@Microsoft.Compute/virtualMachines/web-1"},
				"default/db":  {"10.0.4.6:5432@Microsoft.Compute/virtualMachines/db-1"},
			},
		},
		{
			name: "resource groups: only the configured ones are read",
			fx: fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{
				{ResourceGroup: "rg-a", Name: "in", Tags: tags("in.default", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.5.4"}}},
				{ResourceGroup: "rg-b", Name: "out", Tags: tags("out.default", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.5.5"}}},
			}},
			config: `"resourceGroups": ["RG-A"]`,
			want:   map[string][]string{"default/in": {"10.0.5.4:80@Microsoft.Compute/virtualMachineScaleSets/in/virtualMachines/0"}},
		},
		{
			name: "custom tag names, tag names case-insensitive",
			fx: fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{
				{ResourceGroup: "rg-a", Name: "ss", Tags: map[string]string{"Mesh-Service": "api.prod", "MESH-PORT": "8443"}, Instances: []fakearm.Instance{{PrivateIP: "10.0.6.4"}}},
				{ResourceGroup: "rg-a", Name: "default-tags", Tags: tags("ignored.default", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.6.5"}}},
			}},
			config: `"serviceTag": "mesh-service", "portTag": "mesh-port"`,
			want:   map[string][]string{"prod/api": {"10.0.6.4:8443@Microsoft.Compute/virtualMachineScaleSets/ss/virtualMachines/0"}},
		},
		{
			name: "bad tags are left out and reported; the rest is served",
			fx: fakearm.Fixture{
				ScaleSets: []fakearm.ScaleSet{
					{ResourceGroup: "rg-a", Name: "good", Tags: tags("good.default", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.7.4"}}},
					{ResourceGroup: "rg-a", Name: "nodot", Tags: tags("bookstore", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.7.5"}}},
					{ResourceGroup: "rg-a", Name: "upper", Tags: tags("Bookstore.default", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.7.6"}}},
					{ResourceGroup: "rg-a", Name: "noport", Tags: map[string]string{"osm-service": "x.default"}, Instances: []fakearm.Instance{{PrivateIP: "10.0.7.7"}}},
				},
				VirtualMachines: []fakearm.VirtualMachine{
					{ResourceGroup: "rg-a", Tags: map[string]string{"osm-service": "y.default", "osm-port": "http"}, Instance: fakearm.Instance{Name: "vm", PrivateIP: "10.0.7.8"}},
				},
			},
			want: map[string][]string{"default/good": {"10.0.7.4:80@Microsoft.Compute/virtualMachineScaleSets/good/virtualMachines/0"}},
			problems: []string{
				`virtualMachineScaleSets/nodot: tag osm-service "bookstore" is not <name>.<namespace>`,
				`virtualMachineScaleSets/upper: tag osm-service "Bookstore.default": service name "Bookstore" is not a DNS-1123 label`,
				`virtualMachineScaleSets/noport: tag osm-port is missing; set it to the port default/x listens on`,
				`virtualMachines/vm: tag osm-port "http" is not a port`,
			},
		},
		{
			name: "instances without a NIC yet are left out",
			fx: fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{
				{ResourceGroup: "rg-a", Name: "u", Tags: tags("u.default", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.8.4"}, {PrivateIP: "10.0.8.5", NoNIC: true}}},
				{ResourceGroup: "rg-a", Name: "f", Mode: "Flexible", Tags: tags("f.default", 80), Instances: []fakearm.Instance{{Name: "f1", PrivateIP: "10.0.8.6", NoNIC: true}}},
			}},
			want: map[string][]string{
				"default/u": {"10.0.8.4:80@Microsoft.Compute/virtualMachineScaleSets/u/virtualMachines/0"},
				"default/f": {},
			},
		},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			p := startModel(ctx, t, fakearm.New(testSub, tc.fx), tc.config)
			got, err := snapshot(ctx, p, true)
			if err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("services (-want +got):\n%s", diff)
			}
			health := ""
			if err := p.State().Health(); err != nil {
				health = err.Error()
			}
			for _, want := range tc.problems {
				if !strings.Contains(health, want) {
					t.Errorf("health = %q; want it to contain %q", health, want)
				}
			}
			if len(tc.problems) == 0 && health != "" {
				t.Errorf("health = %q; want healthy", health)
			}
		})
	}
}

func TestEndpointLabels(t *testing.T) {
	ctx := t.Context()
	m := fakearm.New(testSub, fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{
		{ResourceGroup: "rg-a", Name: "ss", Tags: tags("api.default", 80), Instances: []fakearm.Instance{{Name: "7", PrivateIP: "10.0.0.4"}}},
	}})
	p := startModel(ctx, t, m, "")
	eps, err := p.ListEndpoints(ctx, provider.Service{Namespace: "default", Name: "api"})
	if err != nil {
		t.Fatalf("ListEndpoints: %v", err)
	}
	want := []map[string]string{{labelResourceID: m.ScaleSetVMID("rg-a", "ss", "7")}}
	var got []map[string]string
	for _, e := range eps {
		got = append(got, e.Labels)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("labels (-want +got):\n%s", diff)
	}
}

func TestPaging(t *testing.T) {
	ctx := t.Context()
	var instances []fakearm.Instance
	var vms []fakearm.VirtualMachine
	var want, wantVMs []string
	for i := range 7 {
		ip := fmt.Sprintf("10.0.0.%d", 10+i)
		instances = append(instances, fakearm.Instance{Name: fmt.Sprintf("flex-%d", i), PrivateIP: ip})
		want = append(want, ip+":80")
		vip := fmt.Sprintf("10.0.1.%d", 10+i)
		vms = append(vms, fakearm.VirtualMachine{ResourceGroup: "rg-a", Tags: tags("vm.default", 81), Instance: fakearm.Instance{Name: fmt.Sprintf("vm-%d", i), PrivateIP: vip}})
		wantVMs = append(wantVMs, vip+":81")
	}
	var scaleSets []fakearm.ScaleSet
	for i := range 5 {
		scaleSets = append(scaleSets, fakearm.ScaleSet{ResourceGroup: "rg-a", Name: fmt.Sprintf("untagged-%d", i)})
	}
	scaleSets = append(scaleSets,
		fakearm.ScaleSet{ResourceGroup: "rg-a", Name: "uni", Tags: tags("uni.default", 80), Instances: instances},
		fakearm.ScaleSet{ResourceGroup: "rg-a", Name: "flex", Mode: "Flexible", Tags: tags("flex.default", 80), Instances: instances},
	)
	m := fakearm.New(testSub, fakearm.Fixture{PageSize: 2, ScaleSets: scaleSets, VirtualMachines: vms})
	for _, cfg := range []string{`"resourceGroups": ["rg-a"], "pollInterval": "1h"`, `"pollInterval": "1h"`} {
		t.Run(cfg, func(t *testing.T) {
			m.ResetCalls()
			p := startModel(ctx, t, m, cfg)
			got, err := snapshot(ctx, p, false)
			if err != nil {
				t.Fatalf("snapshot: %v", err)
			}
			wantSnap := map[string][]string{"default/uni": want, "default/flex": want, "default/vm": wantVMs}
			if diff := cmp.Diff(wantSnap, got); diff != "" {
				t.Errorf("services (-want +got):\n%s", diff)
			}
			// Each list took several pages.
			listScaleSets, listVMs := fakearm.OpListScaleSets, fakearm.OpListVMs
			if !strings.Contains(cfg, "resourceGroups") {
				listScaleSets, listVMs = fakearm.OpListAllScaleSets, fakearm.OpListAllVMs
			}
			for op, min := range map[string]int{
				listScaleSets:              4, // 7 scale sets
				fakearm.OpListScaleSetVMs:  4, // 7 Uniform instances
				fakearm.OpListScaleSetNICs: 4, // their 7 NICs
				listVMs:                    4, // 7 Flexible members and 7 standalone VMs
				fakearm.OpListNICs:         7, // 14 NICs, listed once per poll
				fakearm.OpInstanceView:     7, // one per tagged standalone VM
			} {
				if got := m.Calls(op); got < min {
					t.Errorf("%s requests = %d; want at least %d (one per page)", op, got, min)
				}
			}
		})
	}
}

func TestScaleOutAndScaleIn(t *testing.T) {
	for _, mode := range []string{"Uniform", "Flexible"} {
		t.Run(mode, func(t *testing.T) {
			ctx := t.Context()
			ss := fakearm.ScaleSet{ResourceGroup: "rg-a", Name: "web", Mode: mode, Tags: tags("web.default", 80), Instances: []fakearm.Instance{
				{Name: "web_1", PrivateIP: "10.0.0.4"}, {Name: "web_2", PrivateIP: "10.0.0.5"},
			}}
			m := fakearm.New(testSub, fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{ss}})
			p := startModel(ctx, t, m, "")
			events := watchEvents(ctx, t, p)
			svc := provider.Service{Namespace: "default", Name: "web"}
			endpointsAre := func(want ...string) func() string {
				return func() string {
					eps, err := p.ListEndpoints(ctx, svc)
					if err != nil {
						return err.Error()
					}
					if got := render(eps, false); !slices.Equal(got, want) {
						return fmt.Sprintf("endpoints %v, want %v", got, want)
					}
					return ""
				}
			}
			waitFor(t, "initial endpoints", endpointsAre("10.0.0.4:80", "10.0.0.5:80"))
			// lastEvent waits for the watcher to have received want, so
			// that the next change cannot coalesce with this one.
			lastEvent := func(want string) {
				t.Helper()
				waitFor(t, "event "+want, func() string {
					if u := events.updates(); len(u) == 0 || u[len(u)-1] != want {
						return fmt.Sprintf("updates %q", u)
					}
					return ""
				})
			}

			m.Update(func(fx *fakearm.Fixture) {
				fx.ScaleSets[0].Instances = append(fx.ScaleSets[0].Instances,
					fakearm.Instance{Name: "web_3", PrivateIP: "10.0.0.6"},
					fakearm.Instance{Name: "web_4", PrivateIP: "10.0.0.7", PowerState: "starting"})
			})
			waitFor(t, "scale-out", endpointsAre("10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80"))
			lastEvent("default/web: 10.0.0.4:80,10.0.0.5:80,10.0.0.6:80")
			m.Update(func(fx *fakearm.Fixture) { fx.ScaleSets[0].Instances[3].PowerState = "running" })
			waitFor(t, "started instance", endpointsAre("10.0.0.4:80", "10.0.0.5:80", "10.0.0.6:80", "10.0.0.7:80"))
			lastEvent("default/web: 10.0.0.4:80,10.0.0.5:80,10.0.0.6:80,10.0.0.7:80")
			m.Update(func(fx *fakearm.Fixture) {
				fx.ScaleSets[0].Instances = fx.ScaleSets[0].Instances[2:]
				fx.ScaleSets[0].Instances[1].PowerState = "deallocated"
			})
			waitFor(t, "scale-in", endpointsAre("10.0.0.6:80"))
			lastEvent("default/web: 10.0.0.6:80")
			m.Update(func(fx *fakearm.Fixture) { fx.ScaleSets = nil })
			waitFor(t, "scale set deleted", func() string {
				if _, err := p.ListEndpoints(ctx, svc); !errors.Is(err, provider.ErrNotFound) {
					return fmt.Sprintf("ListEndpoints error %v; want ErrNotFound", err)
				}
				return ""
			})
			lastEvent("default/web: deleted")
			want := []string{
				"default/web: 10.0.0.4:80,10.0.0.5:80,10.0.0.6:80",
				"default/web: 10.0.0.4:80,10.0.0.5:80,10.0.0.6:80,10.0.0.7:80",
				"default/web: 10.0.0.6:80",
				"default/web: deleted",
			}
			if diff := cmp.Diff(want, events.updates()); diff != "" {
				t.Errorf("watch events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNoEventWithoutChange(t *testing.T) {
	ctx := t.Context()
	m := fakearm.New(testSub, fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{
		{ResourceGroup: "rg-a", Name: "a", Tags: tags("a.default", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.0.4"}}},
		{ResourceGroup: "rg-a", Name: "b", Mode: "Flexible", Tags: tags("b.default", 80), Instances: []fakearm.Instance{{Name: "b1", PrivateIP: "10.0.0.5"}}},
	}})
	p := startModel(ctx, t, m, "")
	events := watchEvents(ctx, t, p)
	// Let several polls pass, some of which see changes that do not
	// change any endpoint: an untagged scale set, a stopped instance.
	polls := func() int { return m.Calls(fakearm.OpListAllScaleSets) }
	waitUntilPolls := func(n int) {
		start := polls()
		waitFor(t, fmt.Sprintf("%d more polls", n), func() string {
			if polls() < start+n {
				return fmt.Sprintf("%d polls", polls()-start)
			}
			return ""
		})
	}
	waitUntilPolls(3)
	m.Update(func(fx *fakearm.Fixture) {
		fx.ScaleSets = append(fx.ScaleSets, fakearm.ScaleSet{ResourceGroup: "rg-a", Name: "c", Instances: []fakearm.Instance{{PrivateIP: "10.0.0.6"}}})
		fx.ScaleSets[0].Instances = append(fx.ScaleSets[0].Instances, fakearm.Instance{PrivateIP: "10.0.0.7", PowerState: "stopped"})
	})
	waitUntilPolls(3)
	if u := events.updates(); len(u) != 0 {
		t.Errorf("watch events without an endpoint change: %q; want none", u)
	}
	m.Update(func(fx *fakearm.Fixture) { fx.ScaleSets[1].Instances[0].PrivateIP = "10.0.0.8" })
	waitFor(t, "one event for b", func() string {
		if u := events.updates(); !slices.Equal(u, []string{"default/b: 10.0.0.8:80"}) {
			return fmt.Sprintf("updates %q", u)
		}
		return ""
	})
	waitUntilPolls(3)
	if diff := cmp.Diff([]string{"default/b: 10.0.0.8:80"}, events.updates()); diff != "" {
		t.Errorf("watch events (-want +got):\n%s", diff)
	}
}

// healthIs waits until the provider's health matches: healthy, or
// unhealthy with a message containing every one of contains.
func healthIs(t *testing.T, p *provider.Plugin, healthy bool, contains ...string) {
	t.Helper()
	waitFor(t, fmt.Sprintf("healthy=%v %q", healthy, contains), func() string {
		err := p.State().Health()
		if healthy {
			if err != nil {
				return "unhealthy: " + err.Error()
			}
			return ""
		}
		if err == nil {
			return "healthy"
		}
		for _, c := range contains {
			if !strings.Contains(err.Error(), c) {
				return fmt.Sprintf("health %q lacks %q", err, c)
			}
		}
		return ""
	})
}

// keepsServing checks that the last good endpoints are still listed.
func keepsServing(ctx context.Context, t *testing.T, p provider.Provider, want map[string][]string) {
	t.Helper()
	got, err := snapshot(ctx, p, false)
	if err != nil {
		t.Fatalf("snapshot while unhealthy: %v; want the last good endpoints", err)
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("endpoints while unhealthy (-want +got):\n%s", diff)
	}
}

func oneScaleSet() fakearm.Fixture {
	return fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{
		{ResourceGroup: "rg-a", Name: "web", Tags: tags("web.default", 80), Instances: []fakearm.Instance{{PrivateIP: "10.0.0.4"}}},
	}}
}

var oneScaleSetWant = map[string][]string{"default/web": {"10.0.0.4:80"}}

func TestCredentialFailure(t *testing.T) {
	ctx := t.Context()
	m := fakearm.New(testSub, oneScaleSet())
	p := startModel(ctx, t, m, "")
	events := watchEvents(ctx, t, p)
	healthIs(t, p, true)

	m.Update(func(fx *fakearm.Fixture) {
		fx.CredentialError = "AADSTS7000215: Invalid client secret provided"
		fx.ScaleSets[0].Instances[0].PrivateIP = "10.0.0.99" // must not show while the credential fails
	})
	healthIs(t, p, false, "azure credential (mode testFixture) could not get a token", "AADSTS7000215", "serving the last good endpoints")
	keepsServing(ctx, t, p, oneScaleSetWant)

	m.Update(func(fx *fakearm.Fixture) { fx.CredentialError = "" })
	healthIs(t, p, true)
	waitFor(t, "endpoints after recovery", func() string {
		got, err := snapshot(ctx, p, false)
		if err != nil || !slices.Equal(got["default/web"], []string{"10.0.0.99:80"}) {
			return fmt.Sprintf("%v %v", got, err)
		}
		return ""
	})
	waitFor(t, "health events", func() string {
		h := events.health()
		if len(h) < 2 || h[0].Healthy || !h[len(h)-1].Healthy {
			return fmt.Sprintf("health events %+v; want unhealthy then healthy", h)
		}
		return ""
	})
}

func TestCredentialFailingFromTheStart(t *testing.T) {
	ctx := t.Context()
	fx := oneScaleSet()
	fx.CredentialError = "ManagedIdentityCredential: no managed identity endpoint"
	m := fakearm.New(testSub, fx)
	p := startModel(ctx, t, m, "")
	if _, err := p.ListServices(ctx); !errors.Is(err, provider.ErrUnavailable) || !strings.Contains(err.Error(), "no managed identity endpoint") {
		t.Errorf("ListServices before any good read: error %v; want ErrUnavailable naming the credential failure", err)
	}
	m.Update(func(fx *fakearm.Fixture) { fx.CredentialError = "" })
	healthIs(t, p, true)
	waitFor(t, "first good read", func() string {
		if got, err := snapshot(ctx, p, false); err != nil || !cmp.Equal(got, oneScaleSetWant) {
			return fmt.Sprintf("%v %v", got, err)
		}
		return ""
	})
}

func TestARMErrors(t *testing.T) {
	cases := []struct {
		name     string
		op       string
		status   int
		code     string
		contains []string
	}{
		{"forbidden", fakearm.OpListAllScaleSets, 403, "AuthorizationFailed", []string{"list the virtual machine scale sets of subscription " + testSub, "403 AuthorizationFailed", "Reader role"}},
		{"token rejected", fakearm.OpListScaleSetVMs, 401, "InvalidAuthenticationToken", []string{"list the instances of scale set", "401 InvalidAuthenticationToken", "tenant"}},
		{"server error", fakearm.OpListScaleSetNICs, 500, "InternalServerError", []string{"list the network interfaces of scale set", "500 InternalServerError"}},
		{"throttled by the SDK fake (no Retry-After)", fakearm.OpListAllVMs, 429, "TooManyRequests", []string{"429 TooManyRequests", "throttling", "backing off", "raise pollInterval"}},
		{"subscription not found", fakearm.OpListAllScaleSets, 404, "SubscriptionNotFound", []string{"subscription " + testSub + " not found", "check subscriptionId"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			ctx := t.Context()
			fx := oneScaleSet()
			fx.VirtualMachines = []fakearm.VirtualMachine{{ResourceGroup: "rg-a", Tags: tags("vm.default", 81), Instance: fakearm.Instance{Name: "vm", PrivateIP: "10.0.1.4"}}}
			m := fakearm.New(testSub, fx)
			p := startModel(ctx, t, m, "")
			want := map[string][]string{"default/web": {"10.0.0.4:80"}, "default/vm": {"10.0.1.4:81"}}
			healthIs(t, p, true)
			m.Fail(tc.op, 3, tc.status, tc.code)
			healthIs(t, p, false, tc.contains...)
			keepsServing(ctx, t, p, want)
			healthIs(t, p, true)
			keepsServing(ctx, t, p, want)
		})
	}
}

func TestNotFound(t *testing.T) {
	t.Run("resource group missing", func(t *testing.T) {
		ctx := t.Context()
		p := startModel(ctx, t, fakearm.New(testSub, oneScaleSet()), `"resourceGroups": ["rg-a", "rg-typo"]`)
		healthIs(t, p, false, "list the virtual machine scale sets of resource group rg-typo", "404 ResourceGroupNotFound", "check that resourceGroups names resource groups")
		if _, err := p.ListServices(ctx); !errors.Is(err, provider.ErrUnavailable) {
			t.Errorf("ListServices error %v; want ErrUnavailable (no complete read yet)", err)
		}
	})
	t.Run("scale set deleted while being read", func(t *testing.T) {
		ctx := t.Context()
		fx := oneScaleSet()
		fx.ScaleSets = append(fx.ScaleSets, fakearm.ScaleSet{ResourceGroup: "rg-a", Name: "flex", Mode: "Flexible", Tags: tags("flex.default", 80), Instances: []fakearm.Instance{{Name: "f1", PrivateIP: "10.0.0.5"}}})
		m := fakearm.New(testSub, fx)
		// The scale-set listing names both scale sets, then reading them
		// answers 404: they are gone, which is no error.
		m.Fail(fakearm.OpListScaleSetVMs, 1, 404, "ResourceNotFound")
		m.Fail(fakearm.OpListVMs, 1, 404, "ResourceNotFound")
		p := startModel(ctx, t, m, `"pollInterval": "1h"`)
		got, err := snapshot(ctx, p, false)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		if diff := cmp.Diff(map[string][]string{}, got); diff != "" {
			t.Errorf("services (-want +got):\n%s", diff)
		}
		if err := p.State().Health(); err != nil {
			t.Errorf("health: %v; want healthy (a resource deleted mid-read is not a failure)", err)
		}
	})
	t.Run("standalone VM deleted while being read", func(t *testing.T) {
		ctx := t.Context()
		m := fakearm.New(testSub, fakearm.Fixture{VirtualMachines: []fakearm.VirtualMachine{
			{ResourceGroup: "rg-a", Tags: tags("vm.default", 81), Instance: fakearm.Instance{Name: "vm-1", PrivateIP: "10.0.1.4"}},
			{ResourceGroup: "rg-a", Tags: tags("vm.default", 81), Instance: fakearm.Instance{Name: "vm-2", PrivateIP: "10.0.1.5"}},
		}})
		m.Fail(fakearm.OpInstanceView, 1, 404, "ResourceNotFound")
		p := startModel(ctx, t, m, `"pollInterval": "1h"`)
		got, err := snapshot(ctx, p, false)
		if err != nil {
			t.Fatalf("snapshot: %v", err)
		}
		if diff := cmp.Diff(map[string][]string{"default/vm": {"10.0.1.5:81"}}, got); diff != "" {
			t.Errorf("services (-want +got):\n%s", diff)
		}
	})
	t.Run("flexible scale sets never use the Uniform NIC API, which answers 404 for them", func(t *testing.T) {
		ctx := t.Context()
		m := fakearm.New(testSub, fakearm.Fixture{ScaleSets: []fakearm.ScaleSet{
			{ResourceGroup: "rg-a", Name: "flex", Mode: "Flexible", Tags: tags("flex.default", 80), Instances: []fakearm.Instance{{Name: "f1", PrivateIP: "10.0.0.5"}}},
		}})
		p := startModel(ctx, t, m, `"pollInterval": "1h"`)
		if got, err := snapshot(ctx, p, false); err != nil || !cmp.Equal(got, map[string][]string{"default/flex": {"10.0.0.5:80"}}) {
			t.Errorf("snapshot = %v, %v", got, err)
		}
		if n := m.Calls(fakearm.OpListScaleSetNICs); n != 0 {
			t.Errorf("Uniform scale-set NIC listing called %d times for a Flexible scale set; want 0", n)
		}
		if n := m.Calls(fakearm.OpListScaleSetVMs); n != 0 {
			t.Errorf("Uniform scale-set VM listing called %d times for a Flexible scale set; want 0", n)
		}
	})
}

func TestRetryAfter(t *testing.T) {
	t.Run("short Retry-After: azcore retries within the poll", func(t *testing.T) {
		ctx := t.Context()
		m := fakearm.New(testSub, oneScaleSet())
		m.Throttle(fakearm.OpListAllScaleSets, 1, time.Second)
		start := time.Now()
		p := startModel(ctx, t, m, `"pollInterval": "2s"`)
		waitFor(t, "first read", func() string {
			if got, err := snapshot(ctx, p, false); err != nil || !cmp.Equal(got, oneScaleSetWant) {
				return fmt.Sprintf("%v %v", got, err)
			}
			return ""
		})
		if took := time.Since(start); took < time.Second {
			t.Errorf("first read took %v; want at least the 1s Retry-After", took)
		}
		if n := m.Calls(fakearm.OpListAllScaleSets); n != 2 {
			t.Errorf("scale-set list requests = %d; want 2 (the throttled one and its retry)", n)
		}
		if err := p.State().Health(); err != nil {
			t.Errorf("health %v; want healthy (the retry succeeded)", err)
		}
	})
	t.Run("long Retry-After: the poll loop waits it out, serving the last good endpoints", func(t *testing.T) {
		ctx := t.Context()
		m := fakearm.New(testSub, oneScaleSet())
		p := startModel(ctx, t, m, `"pollInterval": "50ms"`)
		healthIs(t, p, true)
		m.Throttle(fakearm.OpListAllScaleSets, 1, 2*time.Second)
		healthIs(t, p, false, "429", "throttling", "waiting the 2s ARM asked for (Retry-After)", "next try in 2s")
		throttledAt := time.Now()
		keepsServing(ctx, t, p, oneScaleSetWant)
		calls := m.Calls(fakearm.OpListAllScaleSets)
		time.Sleep(time.Second)
		if n := m.Calls(fakearm.OpListAllScaleSets); n != calls {
			t.Errorf("%d scale-set list requests during the Retry-After; want none", n-calls)
		}
		healthIs(t, p, true)
		if waited := time.Since(throttledAt); waited < 1500*time.Millisecond {
			t.Errorf("recovered %v after the 429; want about the 2s Retry-After", waited)
		}
	})
}

func TestNextPoll(t *testing.T) {
	throttled := fmt.Errorf("wrapped: %w", &armError{op: "x", err: errors.New("plain")})
	cases := []struct {
		name      string
		err       error
		throttled int
		want      time.Duration
	}{
		{"success", nil, 0, 30 * time.Second},
		{"plain error", throttled, 0, 30 * time.Second},
		{"first 429", throttled, 1, 30 * time.Second},
		{"second 429", throttled, 2, 60 * time.Second},
		{"many 429s capped at 8x", throttled, 10, 240 * time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := nextPoll(30*time.Second, tc.err, tc.throttled); got != tc.want {
				t.Errorf("nextPoll = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNotConfigured(t *testing.T) {
	p := newProvider(testLogger(t), connectARM, nil)
	ctx := t.Context()
	if _, err := p.ListServices(ctx); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("ListServices error %v; want ErrNotConfigured", err)
	}
	if _, err := p.ListEndpoints(ctx, provider.Service{Namespace: "a", Name: "b"}); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("ListEndpoints error %v; want ErrNotConfigured", err)
	}
	if err := p.Watch(ctx, func(provider.Event) error { return nil }); !errors.Is(err, provider.ErrNotConfigured) {
		t.Errorf("Watch error %v; want ErrNotConfigured", err)
	}
}

func TestConfigureTwice(t *testing.T) {
	ctx := t.Context()
	m := fakearm.New(testSub, oneScaleSet())
	p := startModel(ctx, t, m, "")
	err := p.Configure(ctx, "again", []byte(fmt.Sprintf(`{"subscriptionId": %q, "testFixture": "x"}`, testSub)))
	if err == nil || !strings.Contains(err.Error(), "already configured") {
		t.Errorf("second Configure error %v; want one saying it is already configured", err)
	}
}

func TestTwoInstancesIndependent(t *testing.T) {
	ctx := t.Context()
	m1 := fakearm.New(testSub, oneScaleSet())
	m2 := fakearm.New(testSub, fakearm.Fixture{ResourceGroups: []string{"rg-a"}})
	p1, p2 := startModel(ctx, t, m1, ""), startModel(ctx, t, m2, "")
	m2.Update(func(fx *fakearm.Fixture) { fx.CredentialError = "boom" })
	healthIs(t, p2, false, "boom")
	healthIs(t, p1, true)
	keepsServing(ctx, t, p1, oneScaleSetWant)
	ctxTimeout, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if got, err := snapshot(ctxTimeout, p2, false); err != nil || len(got) != 0 {
		t.Errorf("second instance: %v, %v; want no services", got, err)
	}
}

func TestSummarizeProblems(t *testing.T) {
	var many []string
	for i := range 12 {
		many = append(many, fmt.Sprintf("p%d", i))
	}
	cases := []struct {
		name     string
		problems []string
		want     string
	}{
		{"none", nil, ""},
		{"two", []string{"a", "b"}, "a; b"},
		{"more than ten", many, "p0; p1; p2; p3; p4; p5; p6; p7; p8; p9; and 2 more resources with unusable tags"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := summarize(tc.problems); got != tc.want {
				t.Errorf("summarize = %q, want %q", got, tc.want)
			}
		})
	}
}
