package spec

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

func TestSnapshotQueries(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	y := `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: db}
spec: {ports: [{port: 3306, appProtocol: tcp}, {port: 9104, appProtocol: http}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: app}
spec: {serviceAccount: app-sa, ports: [{port: 8080}]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: mysql}
spec: {matches: {name: mysql, ports: [3306]}}
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: app-to-db}
spec:
  destination: {kind: ServiceAccount, name: db}
  sources: [{kind: ServiceAccount, name: app-sa}]
  rules: [{kind: TCPRoute, name: mysql}]
`
	if _, err := s.Apply(t.Context(), mustParse(t, y), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	db := mesh.MeshService{Namespace: "default", Name: "db"}
	app := mesh.MeshService{Namespace: "default", Name: "app"}
	appSA := mesh.ServiceAccount{Namespace: "default", Name: "app-sa"}
	want := []InboundRule{{
		Policy:   Key{Kind: KindTrafficTarget, Namespace: "default", Name: "app-to-db"},
		Sources:  []mesh.ServiceAccount{appSA},
		TCPPorts: []int{3306},
	}}
	if diff := cmp.Diff(want, snap.Inbound(db)); diff != "" {
		t.Errorf("Inbound(db) (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]mesh.MeshService{db}, snap.Upstreams(appSA)); diff != "" {
		t.Errorf("Upstreams(app-sa) (-want +got):\n%s", diff)
	}
	if got := snap.Upstreams(mesh.ServiceAccount{Namespace: "default", Name: "db"}); len(got) != 0 {
		t.Errorf("Upstreams(db) = %v, want none", got)
	}
	dbSA := mesh.ServiceAccount{Namespace: "default", Name: "db"}
	if !snap.Allows(appSA, db) || snap.Allows(dbSA, app) || snap.Allows(appSA, app) || snap.Allows(appSA, mesh.MeshService{Namespace: "default", Name: "nope"}) {
		t.Errorf("Allows: app-sa->db %v (want true), db->app %v, app-sa->app %v, app-sa->unknown %v (want false)",
			snap.Allows(appSA, db), snap.Allows(dbSA, app), snap.Allows(appSA, app), snap.Allows(appSA, mesh.MeshService{Namespace: "default", Name: "nope"}))
	}
	info, _ := snap.Service(app)
	if got, want := info.Hostname(), "app.default.mesh"; got != want {
		t.Errorf("Hostname = %q, want %q", got, want)
	}
	if snap.Permissive() || !snap.RequireConnectedProxy() || snap.VIPRange() != netip.MustParsePrefix(DefaultVIPRange) {
		t.Errorf("defaults: permissive %v, requireConnectedProxy %v, vipRange %v", snap.Permissive(), snap.RequireConnectedProxy(), snap.VIPRange())
	}

	mc := "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {traffic: {permissive: true}, endpoints: {requireConnectedProxy: false}, certificate: {serviceLifetime: 12h}}\n"
	if _, err := s.Apply(t.Context(), mustParse(t, mc), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	snap = s.Snapshot()
	if !snap.Permissive() || snap.RequireConnectedProxy() || snap.ServiceCertLifetime().String() != "12h0m0s" || snap.ProxyCertLifetime().String() != "168h0m0s" {
		t.Errorf("after MeshConfig: permissive %v, requireConnectedProxy %v, lifetimes %v %v", snap.Permissive(), snap.RequireConnectedProxy(), snap.ServiceCertLifetime(), snap.ProxyCertLifetime())
	}
	if diff := cmp.Diff([]mesh.MeshService{db}, snap.Upstreams(appSA)); diff != "" {
		t.Errorf("permissive Upstreams(app-sa) (-want +got):\n%s", diff)
	}
	if !snap.Allows(dbSA, app) {
		t.Error("permissive: Allows(db, app) = false, want true")
	}
	if diff := cmp.Diff([]mesh.ServiceAccount{appSA, {Namespace: "default", Name: "db"}}, snap.AllowedSources(db)); diff != "" {
		t.Errorf("permissive AllowedSources(db) (-want +got):\n%s", diff)
	}
}

func TestSubscribeCoalesces(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	notify, cancel := s.Subscribe()
	defer cancel()
	for i := range 3 {
		if _, err := s.Apply(t.Context(), mustParse(t, svcYAML(fmt.Sprintf("s%d", i))), ApplyOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	<-notify
	select {
	case <-notify:
		t.Error("second notification pending, want one coalesced signal")
	default:
	}
	if got, want := len(s.Snapshot().Services()), 3; got != want {
		t.Errorf("services = %d, want %d", got, want)
	}
}

// Two servers sharing one store (as with Consul) never hand out the same VIP.
func TestTwoServersShareStore(t *testing.T) {
	st := store.NewMemory()
	a, b := newTestSpec(t, st), newTestSpec(t, st)
	var wg sync.WaitGroup
	for i := range 20 {
		srv := a
		if i%2 == 1 {
			srv = b
		}
		wg.Go(func() {
			if _, err := srv.Apply(t.Context(), mustParse(t, svcYAML(fmt.Sprintf("svc-%d", i))), ApplyOptions{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := a.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	seen := map[netip.Addr]bool{}
	for _, info := range a.Snapshot().Services() {
		if seen[info.VIP] {
			t.Errorf("VIP %s given twice", info.VIP)
		}
		seen[info.VIP] = true
	}
	if got, want := len(seen), 20; got != want {
		t.Errorf("services seen by server a after Refresh = %d, want %d", got, want)
	}
}

func TestRunPicksUpOtherServersChanges(t *testing.T) {
	st := store.NewMemory()
	a, b := newTestSpec(t, st), newTestSpec(t, st)
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error, 1)
	go func() { done <- b.Run(ctx) }()
	notify, unsub := b.Subscribe()
	defer unsub()
	if _, err := a.Apply(t.Context(), mustParse(t, svcYAML("web")), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case <-notify:
	case <-time.After(testwait.Bound(t)):
		t.Fatal("server b saw no change")
	}
	if _, ok := b.Snapshot().Service(mesh.MeshService{Namespace: "default", Name: "web"}); !ok {
		t.Error("server b's snapshot lacks the service applied on a")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v, want nil after cancel", err)
	}
}

// TestUpstreamsOfTargets: with only TrafficTargets deciding, an account's
// upstreams are its targets' destinations' services, sorted, each once,
// never its own: several services per account, a destination named by two
// targets, an account allowed into itself, a target to an account with no
// service, an account no target names.
func TestUpstreamsOfTargets(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	y := `apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: all}
spec: {matches: [{name: all, pathRegex: '/.*'}]}
`
	svc := func(name, sa string) string {
		return fmt.Sprintf("---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: %s}\nspec: {serviceAccount: %s, ports: [{port: 8080}]}\n", name, sa)
	}
	tt := func(name, dst string, srcs ...string) string {
		var ss []string
		for _, src := range srcs {
			ss = append(ss, fmt.Sprintf("{kind: ServiceAccount, name: %s}", src))
		}
		return fmt.Sprintf("---\napiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: %s}\nspec:\n  destination: {kind: ServiceAccount, name: %s}\n  rules: [{kind: HTTPRouteGroup, name: all}]\n  sources: [%s]\n", name, dst, strings.Join(ss, ", "))
	}
	y += svc("web", "front") + svc("web-canary", "front") + svc("api", "back") + svc("db", "data") + svc("cache", "data")
	y += tt("to-back", "back", "front", "back") + tt("to-back-again", "back", "front") + tt("to-data", "data", "back", "front") + tt("to-ghost", "ghost", "front") + tt("to-front", "front", "front")
	if _, err := s.Apply(t.Context(), mustParse(t, y), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	ms := func(names ...string) []mesh.MeshService {
		out := []mesh.MeshService{}
		for _, n := range names {
			out = append(out, mesh.MeshService{Namespace: "default", Name: n})
		}
		return out
	}
	for name, want := range map[string][]mesh.MeshService{
		"front": ms("api", "cache", "db"), "back": ms("cache", "db"),
		"data": ms(), "ghost": ms(), "nobody": ms(),
	} {
		got := snap.Upstreams(mesh.ServiceAccount{Namespace: "default", Name: name})
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("Upstreams(%s) (-want +got):\n%s", name, diff)
		}
	}
}
