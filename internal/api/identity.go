package api

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// Identity is what the identity routes need from the certificate manager.
type Identity interface {
	RootPEM() []byte
	CAHash() string
	ListProxies(ctx context.Context) ([]certificate.ProxyRecord, error)
	RevokeProxy(ctx context.Context, cn string) error
	VerifyProxy(ctx context.Context, peer *x509.Certificate) (certificate.ProxyRecord, error)
	ServiceCertificate(ctx context.Context, sa mesh.ServiceAccount) (*certificate.Certificate, error)
}

// SpecSource is the mesh specification the agent config is read from.
type SpecSource interface {
	Snapshot() *spec.Snapshot
}

// IdentityRoutes serves the CA, the proxy admin routes and the agents'
// config.
type IdentityRoutes struct {
	log  *slog.Logger
	ids  Identity
	spec SpecSource
	opts IdentityOptions
}

// IdentityOptions are the identity routes'.
type IdentityOptions struct {
	// XDSAddress returns the xDS address to give an agent that reached
	// the API with the given Host header.
	XDSAddress func(host string) string
	// Replicas lists the mesh's live replicas (enroll.Replicas.List) for
	// the agent config, so agents can fail over to another when theirs
	// dies. nil: the list is empty and agents keep the servers they know.
	Replicas func() []meshapi.Replica
	// GatewayReports keeps what POST /api/v1/agent/gateway-report
	// receives; nil: the reports are checked and dropped.
	GatewayReports GatewayReports
	// Ejections keeps what POST /api/v1/agent/ejections receives; nil:
	// the reports are checked and dropped.
	Ejections Ejections
}

// Ejections keeps, by proxy CN, the backends each Envoy reports ejected.
type Ejections interface {
	SetEjections(cn string, r meshapi.EjectionReport)
}

// GatewayReports keeps what the agents of gateway machines report of their
// certificate files, by proxy CN, for the Gateway's status.
type GatewayReports interface {
	SetGatewayReport(cn string, r meshapi.GatewayReport)
}

// NewIdentityRoutes returns the routes.
func NewIdentityRoutes(log *slog.Logger, ids Identity, sp SpecSource, opts IdentityOptions) *IdentityRoutes {
	return &IdentityRoutes{log: log, ids: ids, spec: sp, opts: opts}
}

// Public returns the routes served without the admin token.
func (ir *IdentityRoutes) Public() []Route {
	return []Route{
		{Pattern: "GET /api/v1/ca", Handler: http.HandlerFunc(ir.ca)},
		{Pattern: "GET /api/v1/agent/config", Handler: http.HandlerFunc(ir.agentConfig)},
		{Pattern: "POST /api/v1/agent/gateway-report", Handler: http.HandlerFunc(ir.gatewayReport)},
		{Pattern: "POST /api/v1/agent/ejections", Handler: http.HandlerFunc(ir.ejections)},
	}
}

// Admin returns the proxy admin routes (mount behind the admin token):
//
//	GET  /api/v1/proxies               -> meshapi.ProxyList
//	POST /api/v1/proxies/{cn}/revoke   -> meshapi.ProxyRevoked
func (ir *IdentityRoutes) Admin(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/proxies", ir.listProxies)
	mux.HandleFunc("POST /api/v1/proxies/{cn}/revoke", ir.revokeProxy)
}

func (ir *IdentityRoutes) ca(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, meshapi.CAInfo{PEM: string(ir.ids.RootPEM()), Hash: ir.ids.CAHash()})
}

func (ir *IdentityRoutes) listProxies(w http.ResponseWriter, r *http.Request) {
	recs, err := ir.ids.ListProxies(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	list := meshapi.ProxyList{Items: make([]meshapi.Proxy, 0, len(recs))}
	for _, rec := range recs {
		list.Items = append(list.Items, wireProxy(rec))
	}
	writeJSON(w, http.StatusOK, list)
}

func (ir *IdentityRoutes) revokeProxy(w http.ResponseWriter, r *http.Request) {
	cn := r.PathValue("cn")
	err := ir.ids.RevokeProxy(r.Context(), cn)
	switch {
	case errors.Is(err, certificate.ErrNotFound):
		writeError(w, http.StatusNotFound, fmt.Errorf("no proxy %q (osm-server proxy list shows them)", cn))
		return
	case err != nil:
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	ir.log.Info("proxy revoked", "cn", cn)
	writeJSON(w, http.StatusOK, meshapi.ProxyRevoked{CN: cn, State: string(certificate.StateRevoked)})
}

// agentConfig answers an agent authenticated by its proxy certificate.
func (ir *IdentityRoutes) agentConfig(w http.ResponseWriter, r *http.Request) {
	rec, ok := ir.verifyAgent(w, r, "read the agent config")
	if !ok {
		return
	}
	cert, err := ir.ids.ServiceCertificate(r.Context(), rec.ServiceAccount)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("service certificate for %s: %w", rec.ServiceAccount, err))
		return
	}
	snap := ir.spec.Snapshot()
	hosts := []meshapi.HostEntry{}
	for _, up := range snap.Upstreams(rec.ServiceAccount) {
		info, ok := snap.Service(up)
		if !ok || !info.VIP.IsValid() {
			continue
		}
		hosts = append(hosts, meshapi.HostEntry{Hostname: info.Hostname(), IP: info.VIP.String()})
	}
	// External hosts an Egress lets the account reach: its Envoy listens
	// on their VIPs and resolves the real names itself.
	for _, eh := range snap.EgressHosts(rec.ServiceAccount) {
		hosts = append(hosts, meshapi.HostEntry{Hostname: eh.Host, IP: eh.VIP.String()})
	}
	var replicas []meshapi.Replica
	if ir.opts.Replicas != nil {
		replicas = ir.opts.Replicas()
	}
	writeJSON(w, http.StatusOK, meshapi.AgentConfig{
		Identity:   rec.CN,
		Gateway:    gatewayConfig(snap, rec.Service),
		Replicas:   replicas,
		XDSAddress: ir.opts.XDSAddress(r.Host),
		Hosts:      hosts,
		ServiceCertificate: meshapi.ServiceCertificate{
			CertificatePEM: string(cert.GetCertificateChain()),
			PrivateKeyPEM:  string(cert.GetPrivateKey()),
			CAPEM:          string(cert.GetIssuingCA()),
			Expires:        cert.GetExpiration(),
		},
	})
}

// verifyAgent authenticates an agent by its proxy certificate, or answers
// the request with why not.
func (ir *IdentityRoutes) verifyAgent(w http.ResponseWriter, r *http.Request, what string) (certificate.ProxyRecord, bool) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		writeError(w, http.StatusUnauthorized, fmt.Errorf("present the proxy certificate from enrollment (mutual TLS) to %s", what))
		return certificate.ProxyRecord{}, false
	}
	rec, err := ir.ids.VerifyProxy(r.Context(), r.TLS.VerifiedChains[0][0])
	if err != nil {
		writeError(w, http.StatusForbidden, fmt.Errorf("proxy certificate refused: %w (enroll again with a new join token)", err))
		return certificate.ProxyRecord{}, false
	}
	return rec, true
}

// gatewayConfig is the Gateway a machine enrolled as svc serves, as its
// agent checks it (nil when svc names no Gateway).
func gatewayConfig(snap *spec.Snapshot, svc mesh.MeshService) *meshapi.GatewayConfig {
	info, ok := snap.Gateway(svc)
	if !ok {
		return nil
	}
	gc := &meshapi.GatewayConfig{Gateway: svc.String(), Listeners: []meshapi.GatewayListener{}}
	for _, l := range info.Listeners {
		gc.Listeners = append(gc.Listeners, meshapi.GatewayListener{Name: l.Name, Port: l.Port, Protocol: l.Protocol, Hostname: l.Hostname,
			CertificateNamespace: l.Certificate.Namespace, CertificateName: l.Certificate.Name})
	}
	return gc
}

// gatewayReport takes a gateway machine's report of its certificate files.
func (ir *IdentityRoutes) gatewayReport(w http.ResponseWriter, r *http.Request) {
	rec, ok := ir.verifyAgent(w, r, "report")
	if !ok {
		return
	}
	var rep meshapi.GatewayReport
	if err := json.NewDecoder(io.LimitReader(r.Body, 1<<20)).Decode(&rep); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("gateway report: %w (send a meshapi.GatewayReport as JSON)", err))
		return
	}
	// What an agent reports shows in the Gateway's status: bounded.
	const maxProblems, maxText = 64, 2048
	if len(rep.Certificates) > maxProblems {
		rep.Certificates = rep.Certificates[:maxProblems]
	}
	for i := range rep.Certificates {
		c := &rep.Certificates[i]
		c.Listener, c.Error = truncate(c.Listener, 253), truncate(c.Error, maxText)
	}
	if ir.opts.GatewayReports != nil {
		ir.opts.GatewayReports.SetGatewayReport(rec.CN, rep)
	}
	w.WriteHeader(http.StatusNoContent)
}

// ejections takes the backends an agent's Envoy has ejected.
func (ir *IdentityRoutes) ejections(w http.ResponseWriter, r *http.Request) {
	rec, ok := ir.verifyAgent(w, r, "report")
	if !ok {
		return
	}
	var rep meshapi.EjectionReport
	if err := json.NewDecoder(io.LimitReader(r.Body, 4<<20)).Decode(&rep); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("ejection report: %w (send a meshapi.EjectionReport as JSON)", err))
		return
	}
	if err := checkEjectionReport(rep); err != nil {
		writeError(w, http.StatusBadRequest, fmt.Errorf("ejection report: %w", err))
		return
	}
	if ir.opts.Ejections != nil {
		ir.opts.Ejections.SetEjections(rec.CN, rep)
	}
	w.WriteHeader(http.StatusNoContent)
}

// checkEjectionReport checks an ejection report's bounds.
func checkEjectionReport(rep meshapi.EjectionReport) error {
	if n := len(rep.Clusters); n > meshapi.MaxEjectedClusters {
		return fmt.Errorf("clusters: %d, more than %d: send the first %d", n, meshapi.MaxEjectedClusters, meshapi.MaxEjectedClusters)
	}
	for i, c := range rep.Clusters {
		if c.Cluster == "" || len(c.Cluster) > meshapi.MaxEjectionText {
			return fmt.Errorf("clusters[%d].cluster: want a cluster name of 1 to %d bytes", i, meshapi.MaxEjectionText)
		}
		if n := len(c.Hosts); n > meshapi.MaxEjectedHosts {
			return fmt.Errorf("clusters[%d].hosts: %d, more than %d", i, n, meshapi.MaxEjectedHosts)
		}
		for j, h := range c.Hosts {
			if h == "" || len(h) > meshapi.MaxEjectionText {
				return fmt.Errorf("clusters[%d].hosts[%d]: want an address of 1 to %d bytes", i, j, meshapi.MaxEjectionText)
			}
		}
	}
	return nil
}

// truncate shortens s to at most n bytes, on a rune boundary.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return strings.ToValidUTF8(s[:n], "") + "…"
}

// wireProxy is a proxy record as the admin API lists it.
func wireProxy(rec certificate.ProxyRecord) meshapi.Proxy {
	p := meshapi.Proxy{
		CN: rec.CN, Service: rec.Service, ServiceAccount: rec.ServiceAccount, State: string(rec.State),
		Serial: rec.Serial, Issued: rec.Issued, Expires: rec.Expires, LastSeen: rec.LastSeen,
	}
	if o := rec.Overlap; o != nil {
		p.Overlap = &meshapi.OverlapCertificate{Serial: o.Serial, Expires: o.Expires}
	}
	return p
}
