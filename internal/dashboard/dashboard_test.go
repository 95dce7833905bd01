package dashboard

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/pluginhost"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
)

type providers []pluginhost.Status

func (p providers) Status() []pluginhost.Status { return p }

// mesh returns a specification of n services in a chain (service i may
// call service i+1), one endpoint each, and a split.
func newMesh(t testing.TB, n int) (*spec.Spec, *catalog.Catalog) {
	t.Helper()
	var b strings.Builder
	b.WriteString("apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {traffic: {permissive: false}, outbound: {vipRange: 10.128.0.0/12}}\n")
	b.WriteString("---\napiVersion: specs.smi-spec.io/v1alpha4\nkind: TCPRoute\nmetadata: {name: http, namespace: default}\nspec: {matches: {ports: [8080]}}\n")
	for i := range n {
		fmt.Fprintf(&b, "---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: svc-%d, namespace: default}\nspec: {ports: [{name: http, port: 8080, appProtocol: http}]}\n", i)
		if i+1 < n {
			fmt.Fprintf(&b, "---\napiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: to-%d, namespace: default}\nspec: {destination: {kind: ServiceAccount, name: svc-%d, namespace: default}, sources: [{kind: ServiceAccount, name: svc-%d, namespace: default}], rules: [{kind: TCPRoute, name: http}]}\n", i+1, i+1, i)
		}
	}
	b.WriteString("---\napiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: split, namespace: default}\nspec: {service: svc-1, backends: [{service: svc-2, weight: 80}, {service: svc-3, weight: 20}]}\n")
	docs, err := spec.Parse([]byte(b.String()), "test")
	if err != nil {
		t.Fatal(err)
	}
	sp, err := spec.New(context.Background(), slog.New(slog.DiscardHandler), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := sp.Apply(context.Background(), docs, spec.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	cat := catalog.New()
	for i := range n {
		ip := netip.AddrFrom4([4]byte{10, 0, byte(i / 250), byte(i%250 + 1)})
		cat.SetEndpoints("onprem", mesh.MeshService{Namespace: "default", Name: fmt.Sprintf("svc-%d", i)}, []mesh.Endpoint{{IP: ip, Port: 8080, Provider: "onprem"}})
	}
	return sp, cat
}

func TestState(t *testing.T) {
	sp, cat := newMesh(t, 4)
	now := time.Date(2026, 11, 24, 0, 0, 0, 0, time.UTC)
	stale := now.Add(-time.Hour)
	d := New(Sources{
		Spec: sp, Catalog: cat, Providers: providers{{Name: "onprem", State: pluginhost.StateRestarting, StaleSince: &stale}},
		Proxies: func() []Proxy {
			return []Proxy{{CN: "p1", Service: "default/svc-0", Address: "10.0.0.1", NACK: "bad listener", NACKType: "Listener"}}
		},
		Certificates: func() (Certificate, []Certificate) {
			return Certificate{Name: "mesh CA", Expires: now.Add(10 * 24 * time.Hour)},
				[]Certificate{{Name: "default/svc-0", Expires: now.Add(time.Hour), RotateAt: now.Add(-time.Hour)}}
		},
		Now: func() time.Time { return now },
	})
	st := d.Build()
	var edges []string
	for _, e := range st.Edges {
		edges = append(edges, e.From+" -> "+e.To)
	}
	// svc-2 may call svc-3, a backend of svc-1's split, so it calls svc-1.
	if got, want := strings.Join(edges, ", "), "default/svc-0 -> default/svc-1, default/svc-1 -> default/svc-2, default/svc-2 -> default/svc-1, default/svc-2 -> default/svc-3"; got != want {
		t.Errorf("edges = %s, want %s", got, want)
	}
	if len(st.Splits) != 1 || st.Splits[0].Backends[0].Weight != 80 {
		t.Errorf("splits = %+v, want svc-1's 80/20", st.Splits)
	}
	if h := st.Services[0].Endpoints[0].Health; h != "stale" {
		t.Errorf("health of an endpoint of a stale provider = %q, want stale", h)
	}
	for _, want := range []string{"provider onprem is down", "rejected its Listener configuration: bad listener", "mesh CA expires", "default/svc-0 is past its rotation time"} {
		if !strings.Contains(strings.Join(st.Warnings, "\n"), want) {
			t.Errorf("warnings %q lack %q", st.Warnings, want)
		}
	}
}

// TestStateAt1000Services: the state of 1,000 services holds them all,
// and while nothing changes the page's conditional poll is answered 304
// without a body; a change gives a new state. (BenchmarkState measures
// what building it costs.)
func TestStateAt1000Services(t *testing.T) {
	sp, cat := newMesh(t, 1000)
	d := New(Sources{Spec: sp, Catalog: cat, Providers: providers{{Name: "onprem", State: pluginhost.StateRunning}}})
	srv := httptest.NewServer(d.State())
	defer srv.Close()
	get := func(etag string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, srv.URL, nil)
		if etag != "" {
			req.Header.Set("If-None-Match", etag)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		return resp, body
	}
	resp, body := get("")
	var st State
	if err := json.Unmarshal(body, &st); err != nil {
		t.Fatal(err)
	}
	// The chain, and svc-2 -> svc-1: svc-1 splits to svc-3, which svc-2
	// may call, so svc-2 calls svc-1's address.
	if len(st.Services) != 1000 || len(st.Edges) != 1000 {
		t.Fatalf("services %d, edges %d; want 1000, 1000", len(st.Services), len(st.Edges))
	}
	etag := resp.Header.Get("ETag")
	if resp, body := get(etag); resp.StatusCode != http.StatusNotModified || len(body) != 0 {
		t.Errorf("unchanged state with If-None-Match %s: %s with %d bytes, want 304 without a body", etag, resp.Status, len(body))
	}
	cat.SetEndpoints("onprem", mesh.MeshService{Namespace: "default", Name: "svc-7"}, nil)
	if resp, _ := get(etag); resp.StatusCode != http.StatusOK || resp.Header.Get("ETag") == etag {
		t.Errorf("changed state with the old ETag: %s, ETag %s; want 200 and a new ETag", resp.Status, resp.Header.Get("ETag"))
	}
}

// BenchmarkState: building and encoding the state of 1,000 services, as
// each of the page's polls does.
func BenchmarkState(b *testing.B) {
	sp, cat := newMesh(b, 1000)
	d := New(Sources{Spec: sp, Catalog: cat, Providers: providers{{Name: "onprem", State: pluginhost.StateRunning}}})
	h := d.State()
	for b.Loop() {
		w := httptest.NewRecorder()
		h.ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/debug/dashboard", nil))
		b.SetBytes(int64(w.Body.Len()))
	}
}

func TestPageHeaders(t *testing.T) {
	srv := httptest.NewServer(New(Sources{}).Page("/"))
	defer srv.Close()
	for _, path := range []string{"/", "/app.js", "/style.css"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "script-src 'self'") {
			t.Errorf("GET %s: %d, CSP %q", path, resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
		}
	}
}

// A proxy's NACK message is the proxy's to choose: the state shows it cut
// to MaxNACK in the proxy's row and to MaxWarning in the warning, so a
// 3 MB one costs the state (and every poll) kilobytes, not 6 MB.
func TestLargeNACKIsBoundedInTheState(t *testing.T) {
	sp, cat := newMesh(t, 4)
	huge := strings.Repeat("listener 10.0.0.1:8080 cannot bind; ", 3<<20/36)
	d := New(Sources{
		Spec: sp, Catalog: cat, Providers: providers{},
		Proxies: func() []Proxy {
			return []Proxy{{CN: "p1", Service: "default/svc-0", Address: "10.0.0.1", NACK: huge, NACKType: "Listener"}}
		},
	})
	w := httptest.NewRecorder()
	d.State().ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/debug/dashboard/state", nil))
	if n := w.Body.Len(); n > 8<<10 {
		t.Errorf("state with a %d-byte NACK: %d bytes, want at most 8 KiB", len(huge), n)
	}
	st := d.Build()
	if got := st.Proxies[0].NACK; len(got) > MaxNACK || !strings.HasPrefix(got, "listener 10.0.0.1:8080 cannot bind") || !strings.Contains(got, "bytes cut]") {
		t.Errorf("the row's NACK: %d bytes %.60q..., want at most %d, its start and how much was cut", len(got), got, MaxNACK)
	}
	for _, w := range st.Warnings {
		if len(w) > MaxWarning {
			t.Errorf("warning of %d bytes, want at most %d", len(w), MaxWarning)
		}
	}
}

// TestEjectedAndDetail: the backends connected proxies report ejected show
// on the Service they belong to, by which callers; a Service's detail adds
// its effective failure handling and names the proxyless callers, which
// report none.
func TestEjectedAndDetail(t *testing.T) {
	sp, cat := newMesh(t, 4)
	d := New(Sources{
		Spec: sp, Catalog: cat, Providers: providers{},
		Proxies: func() []Proxy {
			return []Proxy{{CN: "p1", Service: "default/svc-0", Flavor: "envoy"}, {CN: "p2", Service: "default/svc-0", Flavor: "grpc"}, {CN: "p3", Service: "default/svc-2", Flavor: "envoy"}}
		},
		Ejections: func() map[string]meshapi.EjectionReport {
			return map[string]meshapi.EjectionReport{
				"p1": {Clusters: []meshapi.EjectedCluster{{Cluster: "default/svc-1", Hosts: []string{"10.0.0.2:8080"}}, {Cluster: "local|default/svc-0|8080", Hosts: []string{"127.0.0.1:8080"}}}},
				"p3": {Clusters: []meshapi.EjectedCluster{{Cluster: "default/svc-1", Hosts: []string{"10.0.0.2:8080", "10.0.0.7:8080"}}}},
				// Not connected: not shown.
				"gone": {Clusters: []meshapi.EjectedCluster{{Cluster: "default/svc-1", Hosts: []string{"10.0.0.9:8080"}}}},
			}
		},
	})
	want := []Ejected{{Backend: "10.0.0.2:8080", By: []string{"default/svc-0 (p1)", "default/svc-2 (p3)"}}, {Backend: "10.0.0.7:8080", By: []string{"default/svc-2 (p3)"}}}
	for _, s := range d.Build().Services {
		var w []Ejected
		if s.Name == "default/svc-1" {
			w = want
		}
		if diff := cmp.Diff(w, s.Ejected); diff != "" {
			t.Errorf("state: %s ejected (-want +got):\n%s", s.Name, diff)
		}
	}

	srv := httptest.NewServer(d.ServiceDetailHandler())
	defer srv.Close()
	resp, err := http.Get(srv.URL + "?service=default/svc-1")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var got ServiceDetail
	if err := json.NewDecoder(resp.Body).Decode(&got); err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(want, got.Ejected); diff != "" {
		t.Errorf("detail ejected (-want +got):\n%s", diff)
	}
	if want := []string{"default/svc-0 (p2)"}; !cmp.Equal(got.ProxylessCallers, want) {
		t.Errorf("proxyless callers = %q, want %q", got.ProxylessCallers, want)
	}
	var callers []string
	for _, c := range got.Resilience.Calls {
		callers = append(callers, c.Caller)
	}
	// svc-2 calls svc-1 through the split whose backend it may call.
	if want := []string{"default/svc-0", "default/svc-2"}; !cmp.Equal(callers, want) {
		t.Errorf("detail callers = %q, want %q", callers, want)
	}
	if got := got.Resilience.Cluster[0]; got.Part != "connectTimeout" || got.Source != "MeshConfig default" {
		t.Errorf("detail connect timeout = %+v, want MeshConfig's", got)
	}
	for q, code := range map[string]int{"?service=default/nope": http.StatusNotFound, "?service=nope": http.StatusBadRequest} {
		resp, err := http.Get(srv.URL + q)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != code {
			t.Errorf("GET %s: %d, want %d", q, resp.StatusCode, code)
		}
	}
}
