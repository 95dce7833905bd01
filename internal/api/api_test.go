package api

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/pluginhost"
)

type fakeProviders struct {
	status []pluginhost.Status
	ready  bool // if not, "lab" has not listed yet
}

func (f fakeProviders) Status() []pluginhost.Status { return f.status }
func (f fakeProviders) Waiting() []string {
	if f.ready {
		return nil
	}
	return []string{"lab"}
}

func newTestServer(t *testing.T, ready bool) *httptest.Server {
	t.Helper()
	cat := catalog.New()
	svc := mesh.MeshService{Namespace: "default", Name: "bookstore"}
	cat.SetEndpoints("onprem", svc, []mesh.Endpoint{{IP: netip.MustParseAddr("10.0.0.5"), Port: 14001, Labels: map[string]string{"version": "v1"}}})
	cat.SetEndpoints("lab", svc, []mesh.Endpoint{{IP: netip.MustParseAddr("10.0.0.6"), Port: 14001}})
	since := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	providers := fakeProviders{ready: ready, status: []pluginhost.Status{
		{Name: "onprem", State: pluginhost.StateRunning, LastSync: since},
		{Name: "lab", State: pluginhost.StateRestarting, StaleSince: &since, Restarts: 2},
	}}
	reg := prometheus.NewPedanticRegistry()
	debug := New(slog.New(slog.DiscardHandler), "test", testAdminToken, cat, providers, Options{XDS: fakeXDS{}, Metrics: reg, Dashboard: fakeDashboard{}})
	if err := debug.Instrument(reg); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(debug.Handler())
	t.Cleanup(srv.Close)
	return srv
}

const testAdminToken = "s3cret-admin-token"

type fakeDashboard struct{}

func (fakeDashboard) Page(string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "<html>page</html>") })
}

func (fakeDashboard) State() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, `{"state":1}`) })
}

func (fakeDashboard) ServiceDetailHandler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"detail":"`+r.URL.Query().Get("service")+`"}`)
	})
}

type fakeXDS struct{}

func (fakeXDS) Proxies() any { return []string{"p1"} }
func (fakeXDS) Config(proxy string) (json.RawMessage, error) {
	return json.RawMessage(`{"config":"of ` + proxy + `"}`), nil
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return getAuth(t, url, "")
}

// getAuth is get with an Authorization header ("" for none).
func getAuth(t *testing.T, url, auth string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if auth != "" {
		req.Header.Set("Authorization", auth)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestEndpointsMarkStaleProviders(t *testing.T) {
	srv := newTestServer(t, true)
	code, body := get(t, srv.URL+"/api/v1/services/default/bookstore/endpoints")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var got ServiceEndpointsView
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	var summary []string
	for _, e := range got.Endpoints {
		s := e.AddrPort().String() + "@" + e.Provider
		if e.Stale {
			s += " stale"
		}
		summary = append(summary, s)
	}
	if diff := cmp.Diff([]string{"10.0.0.5:14001@onprem", "10.0.0.6:14001@lab stale"}, summary); diff != "" {
		t.Errorf("endpoints (-want +got):\n%s", diff)
	}
}

// /readyz waits for every check added after the providers' first lists:
// osm-server adds "the xDS listener is open", so a client that waits for
// readiness can dial xDS at once.
func TestReadyChecks(t *testing.T) {
	var srv *Server
	get := func() (int, string) {
		rec := httptest.NewRecorder()
		srv.Handler().ServeHTTP(rec, httptest.NewRequest("GET", "http://127.0.0.1/readyz", nil))
		return rec.Code, rec.Body.String()
	}
	srv = New(slog.New(slog.DiscardHandler), "test", testAdminToken, catalog.New(), fakeProviders{ready: true}, Options{})
	if code, body := get(); code != 200 {
		t.Fatalf("/readyz with no checks = %d %q, want 200", code, body)
	}
	var listening atomic.Bool
	srv = New(slog.New(slog.DiscardHandler), "test", testAdminToken, catalog.New(), fakeProviders{ready: true}, Options{ReadyChecks: []func() error{func() error {
		if !listening.Load() {
			return errors.New("the xDS listener is not open yet")
		}
		return nil
	}}})
	if code, body := get(); code != 503 || !strings.Contains(body, "the xDS listener is not open yet") {
		t.Errorf("/readyz before xDS listens = %d %q, want 503 naming the xDS listener", code, body)
	}
	listening.Store(true)
	if code, body := get(); code != 200 {
		t.Errorf("/readyz once xDS listens = %d %q, want 200", code, body)
	}
}

func TestRoutes(t *testing.T) {
	srv := newTestServer(t, false)
	const bearer = "Bearer " + testAdminToken
	for _, tc := range []struct {
		path, auth string
		wantCode   int
		wantBody   string
	}{
		{"/healthz", "", 200, "ok"},
		{"/readyz", "", 503, "waiting for the first list from providers [lab]"},
		{"/api/v1/services", "", 200, `"name": "bookstore"`},
		{"/api/v1/services/default/nope/endpoints", "", 404, "service default/nope is not known"},
		{"/api/v1/providers", "", 200, `"staleSince": "2026-01-01T00:00:00Z"`},
		{"/metrics", "", 200, `osm_provider_stale{provider="lab"} 1`},
		{"/metrics", "", 200, `osm_provider_endpoints{provider="onprem"} 1`},
		{"/metrics", "", 200, `osm_provider_restarts_total{provider="lab"} 2`},
		{"/nope", "", 404, "no route GET /nope"},
		// The dashboard's page is open (it holds no data); its state is not.
		{"/dashboard/", "", 200, "<html>page</html>"},
		{"/debug/dashboard", "", 401, "Authorization: Bearer <token>"},
		{"/debug/dashboard/service?service=shop/db", "", 401, "Authorization: Bearer <token>"},
		// The /debug/ routes need the admin token, and say how to pass it.
		{"/debug/proxies", "", 401, "Authorization: Bearer <token>"},
		{"/debug/config/p1", "", 401, "<data-dir>/admin.token"},
		{"/debug/pprof/", "", 401, "no admin token"},
		{"/debug/pprof/cmdline", "", 401, "no admin token"},
		{"/debug/pprof/profile?seconds=1", "", 401, "no admin token"},
		{"/debug/pprof/trace?seconds=1", "", 401, "no admin token"},
		{"/debug/pprof/goroutine?debug=2", "", 401, "no admin token"},
		{"/debug/proxies", "Bearer wrong", 401, "wrong admin token"},
		{"/debug/proxies", bearer, 200, `"p1"`},
		{"/debug/dashboard", bearer, 200, `{"state":1}`},
		{"/debug/dashboard/service?service=shop/db", bearer, 200, `{"detail":"shop/db"}`},
		{"/debug/config/p1", bearer, 200, `"of p1"`},
		{"/debug/pprof/goroutine?debug=1", bearer, 200, "goroutine profile"},
	} {
		t.Run(tc.path+" "+tc.auth, func(t *testing.T) {
			code, body := getAuth(t, srv.URL+tc.path, tc.auth)
			if code != tc.wantCode || !strings.Contains(body, tc.wantBody) {
				t.Errorf("GET %s = %d %.200q; want %d containing %q", tc.path, code, body, tc.wantCode, tc.wantBody)
			}
		})
	}
}
