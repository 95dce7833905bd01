package api

import (
	"context"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
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

// CAInfo is the body of GET /api/v1/ca.
type CAInfo struct {
	PEM  string `json:"pem"`
	Hash string `json:"hash"`
}

// HostEntry is one line of an agent's managed hosts block.
type HostEntry struct {
	Hostname string `json:"hostname"`
	IP       string `json:"ip"`
}

// ServiceCertificate is a service certificate as the agent receives it.
type ServiceCertificate struct {
	CertificatePEM string    `json:"certificatePEM"`
	PrivateKeyPEM  string    `json:"privateKeyPEM"`
	CAPEM          string    `json:"caPEM"`
	Expires        time.Time `json:"expires"`
}

// AgentConfig is the body of GET /api/v1/agent/config.
type AgentConfig struct {
	Identity           string             `json:"identity"`
	XDSAddress         string             `json:"xdsAddress"`
	Hosts              []HostEntry        `json:"hosts"`
	ServiceCertificate ServiceCertificate `json:"serviceCertificate"`
}

// IdentityRoutes serves the CA, the proxy admin routes and the agents'
// config.
type IdentityRoutes struct {
	log  *slog.Logger
	ids  Identity
	spec SpecSource
	// xds returns the xDS address to give an agent that reached the API
	// with the given Host header.
	xds func(host string) string
}

// NewIdentityRoutes returns the routes; xdsAddress maps the Host an agent
// used to the xDS address it should dial.
func NewIdentityRoutes(log *slog.Logger, ids Identity, sp SpecSource, xdsAddress func(host string) string) *IdentityRoutes {
	return &IdentityRoutes{log: log, ids: ids, spec: sp, xds: xdsAddress}
}

// Public returns the routes served without the admin token.
func (ir *IdentityRoutes) Public() []Route {
	return []Route{
		{Pattern: "GET /api/v1/ca", Handler: http.HandlerFunc(ir.ca)},
		{Pattern: "GET /api/v1/agent/config", Handler: http.HandlerFunc(ir.agentConfig)},
	}
}

// Admin returns the proxy admin routes (mount behind the admin token):
//
//	GET  /api/v1/proxies               -> {"items": [ProxyRecord...]}
//	POST /api/v1/proxies/{cn}/revoke   -> ProxyRecord state revoked
func (ir *IdentityRoutes) Admin(mux *http.ServeMux) {
	mux.HandleFunc("GET /api/v1/proxies", ir.listProxies)
	mux.HandleFunc("POST /api/v1/proxies/{cn}/revoke", ir.revokeProxy)
}

func (ir *IdentityRoutes) ca(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, CAInfo{PEM: string(ir.ids.RootPEM()), Hash: ir.ids.CAHash()})
}

func (ir *IdentityRoutes) listProxies(w http.ResponseWriter, r *http.Request) {
	recs, err := ir.ids.ListProxies(r.Context())
	if err != nil {
		writeError(w, http.StatusInternalServerError, err)
		return
	}
	if recs == nil {
		recs = []certificate.ProxyRecord{}
	}
	writeJSON(w, http.StatusOK, struct {
		Items []certificate.ProxyRecord `json:"items"`
	}{recs})
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
	writeJSON(w, http.StatusOK, map[string]string{"cn": cn, "state": string(certificate.StateRevoked)})
}

// agentConfig answers an agent authenticated by its proxy certificate.
func (ir *IdentityRoutes) agentConfig(w http.ResponseWriter, r *http.Request) {
	if r.TLS == nil || len(r.TLS.VerifiedChains) == 0 {
		writeError(w, http.StatusUnauthorized, errors.New("present the proxy certificate from enrollment (mutual TLS) to read the agent config"))
		return
	}
	rec, err := ir.ids.VerifyProxy(r.Context(), r.TLS.VerifiedChains[0][0])
	if err != nil {
		writeError(w, http.StatusForbidden, fmt.Errorf("proxy certificate refused: %w (enroll again with a new join token)", err))
		return
	}
	cert, err := ir.ids.ServiceCertificate(r.Context(), rec.ServiceAccount)
	if err != nil {
		writeError(w, http.StatusInternalServerError, fmt.Errorf("service certificate for %s: %w", rec.ServiceAccount, err))
		return
	}
	snap := ir.spec.Snapshot()
	hosts := []HostEntry{}
	for _, up := range snap.Upstreams(rec.ServiceAccount) {
		info, ok := snap.Service(up)
		if !ok || !info.VIP.IsValid() {
			continue
		}
		hosts = append(hosts, HostEntry{Hostname: info.Hostname(), IP: info.VIP.String()})
	}
	writeJSON(w, http.StatusOK, AgentConfig{
		Identity:   rec.CN,
		XDSAddress: ir.xds(r.Host),
		Hosts:      hosts,
		ServiceCertificate: ServiceCertificate{
			CertificatePEM: string(cert.GetCertificateChain()),
			PrivateKeyPEM:  string(cert.GetPrivateKey()),
			CAPEM:          string(cert.GetIssuingCA()),
			Expires:        cert.GetExpiration(),
		},
	})
}
