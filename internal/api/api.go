// Package api serves osm-server's HTTP listeners: the plain-HTTP debug
// listener (health and readiness probes, Prometheus metrics, the read-only
// JSON API over the catalog and the provider plugins, and the /debug/
// routes) and the HTTPS API: its routing and admin-token check, and the
// identity routes (the CA, proxy administration, the agents' config). The
// enrollment and renewal handlers and the specification's admin routes are
// handed in by osm-server's wiring from internal/enroll and internal/spec.
//
// The debug listener binds to loopback by default and carries no secrets:
//   - configuration dumps go through xds.Redact, so a private key or other
//     secret shows only as a note naming its certificate (serial, SAN,
//     expiry); the one copy of a service key that leaves the server goes to
//     the proxy or agent that owns it, over its own mutual-TLS connection;
//   - the /debug/ routes (proxies, configuration dumps, pprof) need the
//     admin token, the same one as the HTTPS admin API
//     (<data-dir>/admin.token, Authorization: Bearer);
//   - it answers only requests whose Host names it (localhost, a loopback
//     address, or the address it listens on), so a web page cannot reach it
//     through DNS rebinding.
//
// Health, readiness, metrics, the version and the read-only catalog stay
// open to anyone who can reach the address. Everything that changes state
// is on the HTTPS API. docs/security.md has the threat model.
//
// Every read-only route lives here, so operators find the whole surface in
// one place. api reads the catalog, the plugin host, the xDS server's debug
// view and the certificate manager through the small interfaces it declares
// (Catalog, Providers, XDSDebug, Identity); it does not import internal/xds.
package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"slices"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/httpserve"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/pluginhost"
)

// Catalog is the view of the mesh catalog the API reads.
type Catalog interface {
	Snapshot() *catalog.Snapshot
}

// Providers is the view of the plugin host the API reads.
type Providers interface {
	Status() []pluginhost.Status
	Waiting() []string // providers that have not sent their first list
}

// Server is the debug HTTP server.
type Server struct {
	log        *slog.Logger
	catalog    Catalog
	providers  Providers
	version    string
	adminToken string
	mux        *http.ServeMux

	checks []func() error // more readiness conditions (Options.ReadyChecks)

	dashboard bool // Options.Dashboard was set: Serve logs its URL
}

// Options are what a debug server serves beyond its own routes; each one
// left zero is not served.
type Options struct {
	// XDS serves, behind the admin token, GET /debug/proxies (connected
	// proxies, identity, versions sent, ACKed and NACKed, last NACK
	// error) and GET /debug/config/{proxy} (that proxy's full
	// configuration as JSON; XDS must redact its secrets).
	XDS XDSDebug
	// Dashboard serves the dashboard: its page at GET /dashboard/, open
	// like the other read-only routes (it carries no data), and its state
	// at GET /debug/dashboard behind the admin token, like /debug/proxies
	// whose data it shows. The page sends the token as a header.
	Dashboard Dashboard
	// DNSStatus serves GET /api/v1/dns: the DNS publisher's status
	// (health and its cause, names owned, names left alone), when the
	// server publishes.
	DNSStatus func() any
	// Metrics serves GET /metrics: what it gathers, in the Prometheus
	// exposition format (osm-server's registry, which every component
	// registered with).
	Metrics prometheus.Gatherer
	// ReadyChecks are more conditions of readiness: /readyz answers 503
	// with the error of the first check that fails (after the providers'
	// first lists).
	ReadyChecks []func() error
}

// New returns a debug server over the given components. adminToken guards
// the /debug/ routes: it is the HTTPS admin API's token, and an empty one
// refuses those routes to everyone.
func New(log *slog.Logger, version, adminToken string, cat Catalog, providers Providers, opts Options) *Server {
	s := &Server{log: log, catalog: cat, providers: providers, version: version, adminToken: adminToken, mux: http.NewServeMux()}
	s.checks = slices.Clone(opts.ReadyChecks)
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /version", s.versionInfo)
	s.mux.HandleFunc("GET /api/v1/services", s.listServices)
	s.mux.HandleFunc("GET /api/v1/services/{namespace}/{name}/endpoints", s.serviceEndpoints)
	s.mux.HandleFunc("GET /api/v1/providers", s.listProviders)
	// Profiles for diagnosing the server, behind the admin token: a CPU
	// profile or trace costs the server CPU for as long as the caller asks,
	// and goroutine and heap profiles show its internals.
	s.admin("GET /debug/pprof/", pprof.Index)
	s.admin("GET /debug/pprof/cmdline", pprof.Cmdline)
	s.admin("GET /debug/pprof/profile", pprof.Profile)
	s.admin("GET /debug/pprof/symbol", pprof.Symbol)
	s.admin("GET /debug/pprof/trace", pprof.Trace)
	s.mux.HandleFunc("/", s.notFound)
	if opts.XDS != nil {
		s.serveXDSDebug(opts.XDS)
	}
	if opts.Dashboard != nil {
		s.serveDashboard(opts.Dashboard)
	}
	if opts.DNSStatus != nil {
		s.serveDNSStatus(opts.DNSStatus)
	}
	if opts.Metrics != nil {
		s.serveMetrics(opts.Metrics)
	}
	return s
}

// admin serves pattern behind the admin token.
func (s *Server) admin(pattern string, h http.HandlerFunc) {
	s.mux.Handle(pattern, requireAdmin(s.log, s.adminToken, h))
}

// XDSDebug is the view of the xDS server the debug routes read.
type XDSDebug interface {
	// Proxies is the body of GET /debug/proxies.
	Proxies() any
	// Config is the body of GET /debug/config/{proxy}.
	Config(proxy string) (json.RawMessage, error)
}

// serveXDSDebug adds the xDS debug routes (Options.XDS).
func (s *Server) serveXDSDebug(d XDSDebug) {
	s.admin("GET /debug/proxies", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"proxies": d.Proxies()})
	})
	s.admin("GET /debug/config/{proxy}", func(w http.ResponseWriter, r *http.Request) {
		cfg, err := d.Config(r.PathValue("proxy"))
		if err != nil {
			writeError(w, http.StatusNotFound, err)
			return
		}
		writeJSON(w, http.StatusOK, cfg)
	})
}

// serveDNSStatus adds GET /api/v1/dns (Options.DNSStatus).
func (s *Server) serveDNSStatus(status func() any) {
	s.mux.HandleFunc("GET /api/v1/dns", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"publishers": []any{status()}})
	})
}

// Handler returns the server's routes, without the Host check Serve adds.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve listens on addr until ctx is done, answering only requests whose
// Host names this listener (httpserve.HostCheck).
func (s *Server) Serve(ctx context.Context, addr string, opts ServeOptions) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug listener on %s: %w (set debugAddress / --debug-address to a free address)", addr, err)
	}
	if opts.Ready != nil {
		opts.Ready <- ln.Addr()
	}
	srv := opts.server(httpserve.HostCheck(s.log, "debug listener", addr, ln.Addr(), opts.Names, s.mux))
	srv.ErrorLog = slog.NewLogLogger(s.log.Handler(), slog.LevelDebug)
	s.log.Info("debug API listening", "address", ln.Addr().String())
	if s.dashboard {
		s.log.Info("dashboard (read-only; asks for the admin token in <data-dir>/admin.token)", "url", "http://"+ln.Addr().String()+DashboardPath)
	}
	if ip, err := netip.ParseAddrPort(ln.Addr().String()); err == nil && !ip.Addr().IsLoopback() {
		s.log.Warn("the debug listener is not on loopback: its admin token crosses the network in clear text; keep debugAddress on 127.0.0.1 and use an SSH tunnel", "address", ln.Addr().String())
	}
	return httpserve.Serve(ctx, "debug listener", srv, ln)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "ok")
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if waiting := s.providers.Waiting(); len(waiting) > 0 {
		http.Error(w, fmt.Sprintf("not ready: waiting for the first list from providers %v (see /api/v1/providers)", waiting), http.StatusServiceUnavailable)
		return
	}
	for _, check := range s.checks {
		if err := check(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	fmt.Fprintln(w, "ok")
}

func (s *Server) versionInfo(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"version": s.version})
}

// ServiceSummary is one row of GET /api/v1/services.
type ServiceSummary struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
	Endpoints int    `json:"endpoints"`
	Version   uint64 `json:"version"`
}

func (s *Server) listServices(w http.ResponseWriter, _ *http.Request) {
	snap := s.catalog.Snapshot()
	out := struct {
		Version  uint64           `json:"version"`
		Services []ServiceSummary `json:"services"`
	}{Version: snap.Version, Services: []ServiceSummary{}}
	for _, svc := range snap.Services() {
		se, _ := snap.Endpoints(svc)
		out.Services = append(out.Services, ServiceSummary{Namespace: svc.Namespace, Name: svc.Name, Endpoints: len(se.Endpoints), Version: se.Version})
	}
	writeJSON(w, http.StatusOK, out)
}

// EndpointView is one endpoint in GET /api/v1/services/{ns}/{name}/endpoints.
type EndpointView struct {
	mesh.Endpoint
	// Stale is set when the endpoint's provider is down and this is the last
	// value it reported.
	Stale bool `json:"stale,omitempty"`
}

// ServiceEndpointsView is the body of GET /api/v1/services/{ns}/{name}/endpoints.
type ServiceEndpointsView struct {
	Service   mesh.MeshService `json:"service"`
	Version   uint64           `json:"version"`
	Endpoints []EndpointView   `json:"endpoints"`
}

func (s *Server) serviceEndpoints(w http.ResponseWriter, r *http.Request) {
	svc := mesh.MeshService{Namespace: r.PathValue("namespace"), Name: r.PathValue("name")}
	se, ok := s.catalog.Snapshot().Endpoints(svc)
	if !ok {
		writeError(w, http.StatusNotFound, fmt.Errorf("service %s is not known to any provider (GET /api/v1/services lists the known ones)", svc))
		return
	}
	stale := map[string]bool{}
	for _, st := range s.providers.Status() {
		stale[st.Name] = st.StaleSince != nil
	}
	out := ServiceEndpointsView{Service: svc, Version: se.Version, Endpoints: make([]EndpointView, len(se.Endpoints))}
	for i, e := range se.Endpoints {
		out.Endpoints[i] = EndpointView{Endpoint: e, Stale: stale[e.Provider]}
	}
	writeJSON(w, http.StatusOK, out)
}

func (s *Server) listProviders(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, struct {
		Providers []pluginhost.Status `json:"providers"`
	}{s.providers.Status()})
}

func (s *Server) notFound(w http.ResponseWriter, r *http.Request) {
	writeError(w, http.StatusNotFound, fmt.Errorf("no route %s %s on the debug API (routes: /healthz, /readyz, /metrics, /version, /dashboard/, /api/v1/services, /api/v1/services/{namespace}/{name}/endpoints, /api/v1/providers, /api/v1/dns (with DNS publishing); with the admin token: /debug/dashboard, /debug/proxies, /debug/config/{proxy}, /debug/pprof/)", r.Method, r.URL.Path))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false) // error texts such as "Bearer <token>" read as written
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, meshapi.ErrorBody{Error: err.Error()})
}

// Dashboard is the live web view the debug listener serves.
type Dashboard interface {
	// Page serves the page and its assets under prefix; they hold no data.
	Page(prefix string) http.Handler
	// State serves the JSON state the page polls.
	State() http.Handler
	// ServiceDetailHandler serves one Service's detail the page asks for
	// when the operator picks it (?service=namespace/name).
	ServiceDetailHandler() http.Handler
}

// DashboardPath is where the debug listener serves the dashboard's page.
const DashboardPath = "/dashboard/"

// serveDashboard adds the dashboard's routes (Options.Dashboard).
func (s *Server) serveDashboard(d Dashboard) {
	s.dashboard = true
	s.mux.Handle("GET "+DashboardPath, d.Page(DashboardPath))
	s.admin("GET /debug/dashboard", d.State().ServeHTTP)
	s.admin("GET /debug/dashboard/service", d.ServiceDetailHandler().ServeHTTP)
}
