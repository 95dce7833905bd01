// Package api serves osm-server's plain-HTTP debug listener: health and
// readiness probes, Prometheus metrics, and the read-only JSON API over the
// catalog and the provider plugins. It binds to loopback by default and
// carries no secrets; everything that changes state is on the HTTPS API.
//
// Every read-only route lives here, so operators find the whole surface in
// one place. api reads the catalog and the plugin host through the small
// interfaces it declares.
package api

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"time"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
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
	log       *slog.Logger
	catalog   Catalog
	providers Providers
	version   string
	mux       *http.ServeMux
}

// New returns a debug server over the given components.
func New(log *slog.Logger, version string, cat Catalog, providers Providers) *Server {
	s := &Server{log: log, catalog: cat, providers: providers, version: version, mux: http.NewServeMux()}
	s.mux.HandleFunc("GET /healthz", s.healthz)
	s.mux.HandleFunc("GET /readyz", s.readyz)
	s.mux.HandleFunc("GET /metrics", s.metrics)
	s.mux.HandleFunc("GET /version", s.versionInfo)
	s.mux.HandleFunc("GET /api/v1/services", s.listServices)
	s.mux.HandleFunc("GET /api/v1/services/{namespace}/{name}/endpoints", s.serviceEndpoints)
	s.mux.HandleFunc("GET /api/v1/providers", s.listProviders)
	// Profiles for diagnosing the server (the debug address is loopback
	// by default and carries no secrets).
	s.mux.HandleFunc("GET /debug/pprof/", pprof.Index)
	s.mux.HandleFunc("GET /debug/pprof/cmdline", pprof.Cmdline)
	s.mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	s.mux.HandleFunc("GET /debug/pprof/symbol", pprof.Symbol)
	s.mux.HandleFunc("GET /debug/pprof/trace", pprof.Trace)
	s.mux.HandleFunc("/", s.notFound)
	return s
}

// XDSDebug is the view of the xDS server the debug routes read.
type XDSDebug interface {
	// Proxies is the body of GET /debug/proxies.
	Proxies() any
	// Config is the body of GET /debug/config/{proxy}.
	Config(proxy string) (json.RawMessage, error)
}

// ServeXDSDebug adds GET /debug/proxies (connected proxies, identity,
// versions sent, ACKed and NACKed, last NACK error) and GET
// /debug/config/{proxy} (that proxy's full configuration as JSON).
func (s *Server) ServeXDSDebug(d XDSDebug) {
	s.mux.HandleFunc("GET /debug/proxies", func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"proxies": d.Proxies()})
	})
	s.mux.HandleFunc("GET /debug/config/{proxy}", func(w http.ResponseWriter, r *http.Request) {
		cfg, err := d.Config(r.PathValue("proxy"))
		if err != nil {
			writeError(w, http.StatusNotFound, err)
			return
		}
		writeJSON(w, http.StatusOK, cfg)
	})
}

// Handler returns the server's routes.
func (s *Server) Handler() http.Handler { return s.mux }

// Serve listens on addr until ctx is done. ready, when not nil, receives
// the bound address once listening (tests pass port 0).
func (s *Server) Serve(ctx context.Context, addr string, ready chan<- net.Addr) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("debug listener on %s: %w (set debugAddress / --debug-address to a free address)", addr, err)
	}
	if ready != nil {
		ready <- ln.Addr()
	}
	srv := &http.Server{Handler: s.mux, ReadHeaderTimeout: 10 * time.Second}
	s.log.Info("debug API listening", "address", ln.Addr().String())
	return serve(ctx, "debug listener", srv, ln)
}

func (s *Server) healthz(w http.ResponseWriter, _ *http.Request) {
	fmt.Fprintln(w, "ok")
}

func (s *Server) readyz(w http.ResponseWriter, _ *http.Request) {
	if waiting := s.providers.Waiting(); len(waiting) > 0 {
		http.Error(w, fmt.Sprintf("not ready: waiting for the first list from providers %v (see /api/v1/providers)", waiting), http.StatusServiceUnavailable)
		return
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
	writeError(w, http.StatusNotFound, fmt.Errorf("no route %s %s on the debug API (routes: /healthz, /readyz, /metrics, /version, /api/v1/services, /api/v1/services/{namespace}/{name}/endpoints, /api/v1/providers, /debug/proxies, /debug/config/{proxy})", r.Method, r.URL.Path))
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, map[string]string{"error": err.Error()})
}
