package catalog

import (
	"context"
	"io"
	"log/slog"
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// specWith returns a specification whose MeshConfig sets
// endpoints.requireConnectedProxy.
func specWith(t *testing.T, require bool) *spec.Spec {
	t.Helper()
	ctx := context.Background()
	sp, err := spec.New(ctx, slog.New(slog.NewTextHandler(io.Discard, nil)), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	setRule(t, sp, require)
	return sp
}

func setRule(t *testing.T, sp *spec.Spec, require bool) {
	t.Helper()
	v := "false"
	if require {
		v = "true"
	}
	docs, err := spec.Parse([]byte("apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {endpoints: {requireConnectedProxy: "+v+"}}\n"), "mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Apply(context.Background(), docs, spec.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
}

func ipsOf(eps []mesh.Endpoint) []string {
	var out []string
	for _, e := range eps {
		out = append(out, e.IP.String())
	}
	return out
}

func TestModelParticipantRule(t *testing.T) {
	a := mesh.MeshService{Namespace: "ns", Name: "a"}
	b := mesh.MeshService{Namespace: "ns", Name: "b"}
	ip1, ip2 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	cat := New()
	cat.SetEndpoints("p", a, []mesh.Endpoint{{IP: ip1, Port: 80}, {IP: ip2, Port: 80}})
	cat.SetEndpoints("p", b, []mesh.Endpoint{{IP: ip1, Port: 80}})
	sp := specWith(t, true)
	m := NewModel(cat, sp, "td", 0)

	v0 := m.View()
	if got := ipsOf(v0.Endpoints(a)); len(got) != 0 {
		t.Errorf("participants of a with no proxy connected = %v, want none", got)
	}
	if v0.TrustDomain() != "td" || v0.Spec() == nil {
		t.Errorf("view: trust domain %q, spec %v", v0.TrustDomain(), v0.Spec())
	}

	// A connect from an address a has an endpoint on: a changes, b does not.
	m.ProxyConnected(a, ip2)
	m.Update()
	v1 := m.View()
	if got, want := ipsOf(v1.Endpoints(a)), []string{"10.0.0.2"}; !cmp.Equal(got, want) {
		t.Errorf("participants of a = %v, want %v", got, want)
	}
	if got, all := v1.Changed(v0); all || !cmp.Equal(got, []mesh.MeshService{a}) {
		t.Errorf("Changed = %v, %v; want [a], false", got, all)
	}

	// A connect from an address with no endpoint of the service: no view.
	m.ProxyConnected(b, ip2)
	m.Update()
	if m.View() != v1 {
		t.Error("a connect that changes no participants published a view")
	}

	// A second proxy on the same address, then one leaving: still there.
	m.ProxyConnected(a, ip2)
	m.ProxyDisconnected(a, ip2)
	m.Update()
	if m.View() != v1 {
		t.Error("a second proxy on a connected address changed the view")
	}
	m.ProxyDisconnected(a, ip2)
	m.Update()
	v2 := m.View()
	if got := ipsOf(v2.Endpoints(a)); len(got) != 0 {
		t.Errorf("participants of a after its proxy left = %v, want none", got)
	}
	if got, all := v2.Changed(v0); all || len(got) != 1 || got[0] != a {
		t.Errorf("Changed over two views = %v, %v; want [a], false", got, all)
	}

	// Turning the rule off makes every discovered endpoint participate.
	setRule(t, sp, false)
	m.Update()
	v3 := m.View()
	if got, want := ipsOf(v3.Endpoints(a)), []string{"10.0.0.1", "10.0.0.2"}; !cmp.Equal(got, want) {
		t.Errorf("participants of a without the rule = %v, want %v", got, want)
	}
	if _, all := v3.Changed(v2); !all {
		t.Error("a change of the rule did not change every service")
	}
	if v3.Spec().Version() == v2.Spec().Version() {
		t.Error("the view does not carry the new specification")
	}

	// An endpoint change is listed; an unknown service is gone.
	cat.DeleteService("p", b)
	m.Update()
	v4 := m.View()
	if got, all := v4.Changed(v3); all || !cmp.Equal(got, []mesh.MeshService{b}) {
		t.Errorf("Changed after b was deleted = %v, %v; want [b], false", got, all)
	}
	if got := v4.Services(); !cmp.Equal(got, []mesh.MeshService{a}) {
		t.Errorf("Services = %v, want [a]", got)
	}
	// Unchanged services share their endpoints with the previous view.
	if &v4.Endpoints(a)[0] != &v3.Endpoints(a)[0] {
		t.Error("an unchanged service's endpoints were copied")
	}
}

// TestModelChangedBeyondHistory: a reader further behind than the history
// still gets exactly the changed services.
func TestModelChangedBeyondHistory(t *testing.T) {
	cat := New()
	var svcs []mesh.MeshService
	for i := range 3 * maxHistory {
		svc := mesh.MeshService{Namespace: "ns", Name: "s" + string(rune('a'+i%26)) + string(rune('a'+i/26))}
		svcs = append(svcs, svc)
		cat.SetEndpoints("p", svc, []mesh.Endpoint{{IP: netip.MustParseAddr("10.0.0.1"), Port: 80}})
	}
	m := NewModel(cat, specWith(t, false), "td", 0)
	old := m.View()
	recent := old
	for i, svc := range svcs {
		cat.SetEndpoints("p", svc, []mesh.Endpoint{{IP: netip.MustParseAddr("10.0.0.2"), Port: 80}})
		m.Update()
		if i == len(svcs)-3 {
			recent = m.View()
		}
	}
	v := m.View()
	if got, all := v.Changed(old); all || len(got) != len(svcs) {
		t.Errorf("Changed against a view %d versions old: %d services (all %v), want %d", v.Version()-old.Version(), len(got), all, len(svcs))
	}
	if got, all := v.Changed(recent); all || len(got) != 2 {
		t.Errorf("Changed against a recent view: %v (all %v), want 2 services", got, all)
	}
	if got, all := v.Changed(v); all || len(got) != 0 {
		t.Errorf("Changed against itself: %v (all %v), want none", got, all)
	}
}

// TestModelStartupGrace: during the grace every discovered endpoint
// participates; when it ends, only connected proxies' do.
func TestModelStartupGrace(t *testing.T) {
	a := mesh.MeshService{Namespace: "ns", Name: "a"}
	cat := New()
	cat.SetEndpoints("p", a, []mesh.Endpoint{{IP: netip.MustParseAddr("10.0.0.1"), Port: 80}})
	m := NewModel(cat, specWith(t, true), "td", 50*time.Millisecond)
	if got := m.View().Endpoints(a); len(got) != 1 {
		t.Fatalf("participants in the grace = %v, want the discovered endpoint", got)
	}
	notify, cancel := m.Subscribe()
	defer cancel()
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- m.Run(ctx) }()
	defer func() { stop(); <-done }()
	deadline := time.After(testwait.Bound(t))
	for len(m.View().Endpoints(a)) != 0 {
		select {
		case <-notify:
		case <-deadline:
			t.Fatal("the grace did not end")
		}
	}
}

// TestModelStartupGraceKnowsReconnectedMachines: during the grace an
// address stands in for every service discovered on it only until a proxy
// connects from it; from then on it participates, as after the grace, only
// for the services connected from it. So a TrafficSplit's root whose
// machines enrolled as its backends (bookstore on the addresses of
// bookstore-v1 and bookstore-v2) is empty as soon as those machines are
// connected, not 20 seconds after the server started, while a machine that
// has not reconnected yet keeps its endpoints.
func TestModelStartupGraceKnowsReconnectedMachines(t *testing.T) {
	svc := func(name string) mesh.MeshService { return mesh.MeshService{Namespace: "default", Name: name} }
	root, v1, v2, other := svc("bookstore"), svc("bookstore-v1"), svc("bookstore-v2"), svc("other")
	ip3, ip4, ip9 := netip.MustParseAddr("10.0.0.3"), netip.MustParseAddr("10.0.0.4"), netip.MustParseAddr("10.0.0.9")
	ep := func(ip netip.Addr) mesh.Endpoint { return mesh.Endpoint{IP: ip, Port: 14001} }
	cat := New()
	cat.SetEndpoints("p", root, []mesh.Endpoint{ep(ip3), ep(ip4)})
	cat.SetEndpoints("p", v1, []mesh.Endpoint{ep(ip3)})
	cat.SetEndpoints("p", v2, []mesh.Endpoint{ep(ip4)})
	cat.SetEndpoints("p", other, []mesh.Endpoint{ep(ip9)})
	m := NewModel(cat, specWith(t, true), "td", time.Hour)
	check := func(step string, want map[mesh.MeshService][]string) {
		t.Helper()
		v := m.View()
		for s, w := range want {
			if got := ipsOf(v.Endpoints(s)); !cmp.Equal(got, w, cmpopts.EquateEmpty()) {
				t.Errorf("%s: participants of %s = %v, want %v", step, s, got, w)
			}
		}
	}
	check("no proxy connected yet", map[mesh.MeshService][]string{
		root: {"10.0.0.3", "10.0.0.4"}, v1: {"10.0.0.3"}, v2: {"10.0.0.4"}, other: {"10.0.0.9"},
	})

	v0 := m.View()
	m.ProxyConnected(v1, ip3)
	m.Update()
	check("bookstore-v1's machine connected", map[mesh.MeshService][]string{
		root: {"10.0.0.4"}, v1: {"10.0.0.3"}, v2: {"10.0.0.4"}, other: {"10.0.0.9"},
	})
	if got, all := m.View().Changed(v0); all || !cmp.Equal(got, []mesh.MeshService{root}) {
		t.Errorf("Changed after bookstore-v1's machine connected = %v, %v; want [%s], false", got, all, root)
	}

	m.ProxyConnected(v2, ip4)
	m.ProxyConnected(v2, ip4) // its Envoy and its gRPC apps
	m.Update()
	check("both backends' machines connected", map[mesh.MeshService][]string{
		root: nil, v1: {"10.0.0.3"}, v2: {"10.0.0.4"}, other: {"10.0.0.9"},
	})

	cat.SetEndpoints("p", v2, nil)
	m.Update()
	check("bookstore-v2's last endpoint gone", map[mesh.MeshService][]string{
		root: nil, v1: {"10.0.0.3"}, v2: nil, other: {"10.0.0.9"},
	})

	// A machine whose proxies all left stands in for its services again
	// while the grace lasts (it may be reconnecting).
	m.ProxyDisconnected(v1, ip3)
	m.Update()
	check("bookstore-v1's machine left", map[mesh.MeshService][]string{
		root: {"10.0.0.3"}, v1: {"10.0.0.3"}, other: {"10.0.0.9"},
	})
	m.ProxyDisconnected(v2, ip4)
	m.Update()
	check("one of bookstore-v2's two proxies left", map[mesh.MeshService][]string{root: {"10.0.0.3"}})
}

// TestModelRemotePresence: a proxy connected to another replica counts as
// connected here (the participant rule across replicas); a replica's set
// is replaced as a whole, and a replica that says nothing (its record
// gone) contributes nothing. Only the services whose participants change
// are in the next View's Changed.
func TestModelRemotePresence(t *testing.T) {
	a := mesh.MeshService{Namespace: "ns", Name: "a"}
	b := mesh.MeshService{Namespace: "ns", Name: "b"}
	ip1, ip2 := netip.MustParseAddr("10.0.0.1"), netip.MustParseAddr("10.0.0.2")
	cat := New()
	cat.SetEndpoints("p", a, []mesh.Endpoint{{IP: ip1, Port: 80}, {IP: ip2, Port: 80}})
	cat.SetEndpoints("p", b, []mesh.Endpoint{{IP: ip2, Port: 80}})
	m := NewModel(cat, specWith(t, true), "td", 0)
	check := func(step string, want map[mesh.MeshService][]string, changed []mesh.MeshService, since *View) {
		t.Helper()
		v := m.View()
		for s, w := range want {
			if got := ipsOf(v.Endpoints(s)); !cmp.Equal(got, w, cmpopts.EquateEmpty()) {
				t.Errorf("%s: participants of %s = %v, want %v", step, s, got, w)
			}
		}
		if got, all := v.Changed(since); all || !cmp.Equal(got, changed, cmpopts.EquateEmpty()) {
			t.Errorf("%s: Changed = %v (all %v), want %v", step, got, all, changed)
		}
	}

	v0 := m.View()
	m.SetRemotePresence("r2", map[mesh.MeshService][]netip.Addr{a: {ip1}})
	m.Update()
	check("a's proxy on 10.0.0.1 connected to r2", map[mesh.MeshService][]string{a: {"10.0.0.1"}, b: nil}, []mesh.MeshService{a}, v0)

	// The same address connected here and on r3 too: one goes, it stays.
	v1 := m.View()
	m.ProxyConnected(a, ip1)
	m.SetRemotePresence("r3", map[mesh.MeshService][]netip.Addr{a: {ip1}, b: {ip2}})
	m.Update()
	check("also here and on r3, and b on r3", map[mesh.MeshService][]string{a: {"10.0.0.1"}, b: {"10.0.0.2"}}, []mesh.MeshService{b}, v1)
	v2 := m.View()
	m.SetRemotePresence("r2", nil)
	m.ProxyDisconnected(a, ip1)
	m.Update()
	check("gone from r2 and here, still on r3", map[mesh.MeshService][]string{a: {"10.0.0.1"}, b: {"10.0.0.2"}}, nil, v2)

	// r3's set replaced: a moved from 10.0.0.1 to 10.0.0.2, b left.
	m.SetRemotePresence("r3", map[mesh.MeshService][]netip.Addr{a: {ip2, ip2}})
	m.Update()
	check("r3's set replaced", map[mesh.MeshService][]string{a: {"10.0.0.2"}, b: nil}, []mesh.MeshService{a, b}, v2)

	// r3's record removed: nothing of it counts.
	v3 := m.View()
	m.SetRemotePresence("r3", nil)
	m.Update()
	check("r3's record removed", map[mesh.MeshService][]string{a: nil, b: nil}, []mesh.MeshService{a}, v3)
}

// TestModelRemotePresenceInGrace: during the startup grace an address with
// a proxy connected to another replica counts only for that proxy's
// service, as one connected here does; once the other replica's set no
// longer has it, it stands in for every service discovered on it again.
func TestModelRemotePresenceInGrace(t *testing.T) {
	root := mesh.MeshService{Namespace: "default", Name: "bookstore"}
	v1 := mesh.MeshService{Namespace: "default", Name: "bookstore-v1"}
	ip3 := netip.MustParseAddr("10.0.0.3")
	cat := New()
	cat.SetEndpoints("p", root, []mesh.Endpoint{{IP: ip3, Port: 14001}})
	cat.SetEndpoints("p", v1, []mesh.Endpoint{{IP: ip3, Port: 14001}})
	m := NewModel(cat, specWith(t, true), "td", time.Hour)
	if got := ipsOf(m.View().Endpoints(root)); !cmp.Equal(got, []string{"10.0.0.3"}) {
		t.Fatalf("participants of the root in the grace, nothing connected = %v, want [10.0.0.3]", got)
	}
	m.SetRemotePresence("r2", map[mesh.MeshService][]netip.Addr{v1: {ip3}})
	m.Update()
	if got := ipsOf(m.View().Endpoints(root)); len(got) != 0 {
		t.Errorf("participants of the root once bookstore-v1's machine is connected to r2 = %v, want none", got)
	}
	if got := ipsOf(m.View().Endpoints(v1)); !cmp.Equal(got, []string{"10.0.0.3"}) {
		t.Errorf("participants of bookstore-v1 = %v, want [10.0.0.3]", got)
	}
	m.SetRemotePresence("r2", map[mesh.MeshService][]netip.Addr{})
	m.Update()
	if got := ipsOf(m.View().Endpoints(root)); !cmp.Equal(got, []string{"10.0.0.3"}) {
		t.Errorf("participants of the root once r2's set is empty, in the grace = %v, want [10.0.0.3]", got)
	}
}
