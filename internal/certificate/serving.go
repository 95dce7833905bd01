package certificate

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"fmt"
	"net"
	"net/url"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// ServingCertificate returns a tls.Config.GetCertificate function that
// serves a server certificate from the mesh CA for hosts (DNS names or IP
// addresses; the first is also the common name) and the control plane's
// identity (mesh.ControlPlaneSPIFFEID), which every client of the control
// plane requires: a machine's certificate, also from the mesh CA, cannot
// pose as the server. The certificate lives
// the proxy lifetime in force when it is issued and is replaced on the first handshake after two thirds of
// it has passed; if that fails the old one is served while it is valid.
// The chain sent is the leaf and the mesh root, so a client that pins the
// root by CAHash (an enrolling agent) finds it in the handshake.
// Each replica holds its own serving certificate in memory.
func (m *Manager) ServingCertificate(hosts []string) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	var (
		mu      sync.Mutex
		cur     *tls.Certificate
		renewAt time.Time
	)
	return func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
		mu.Lock()
		defer mu.Unlock()
		now := m.now()
		if cur != nil && now.Before(renewAt) {
			return cur, nil
		}
		c, err := m.issueServing(hosts, now)
		if err != nil {
			if cur != nil && now.Before(cur.Leaf.NotAfter) {
				m.log.Error("renew serving certificate; serving the old one", "hosts", hosts, "err", err)
				return cur, nil
			}
			return nil, err
		}
		cur = c
		renewAt = now.Add(c.Leaf.NotAfter.Sub(now) * 2 / 3)
		return cur, nil
	}
}

func (m *Manager) issueServing(hosts []string, now time.Time) (*tls.Certificate, error) {
	if len(hosts) == 0 {
		return nil, errors.New("serving certificate: no host names or addresses given")
	}
	tmpl := &x509.Certificate{
		Subject:     pkix.Name{CommonName: hosts[0], Organization: []string{"osm-vm"}},
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    now.Add(time.Duration(m.proxyLife.Load())),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	id, err := url.Parse(mesh.ControlPlaneSPIFFEID(m.opts.TrustDomain))
	if err != nil {
		return nil, fmt.Errorf("serving certificate: control plane identity: %w", err)
	}
	tmpl.URIs = []*url.URL{id}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("serving certificate: generate key: %w", err)
	}
	leaf, _, err := m.ca.sign(tmpl, &key.PublicKey)
	if err != nil {
		return nil, fmt.Errorf("serving certificate for %v: %w", hosts, err)
	}
	return &tls.Certificate{
		Certificate: [][]byte{leaf.Raw, m.ca.cert.Raw},
		PrivateKey:  key,
		Leaf:        leaf,
	}, nil
}

// LeafOnly serves get's certificate without the rest of its chain: for
// the xDS listener, whose every client (Envoy, an agent, a proxyless gRPC
// client) trusts the mesh root from its enrollment and pins nothing. The
// root is not needed to verify the leaf, and each handshake that carries
// it costs the client a second signature check (Go's verifier tries the
// chain's copy of the root as an intermediate too) and 0.5 KiB more.
// Renewals pass through: a new certificate from get gets a new leaf-only
// copy.
func LeafOnly(get func(*tls.ClientHelloInfo) (*tls.Certificate, error)) func(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	var (
		mu         sync.Mutex
		from, leaf *tls.Certificate
	)
	return func(h *tls.ClientHelloInfo) (*tls.Certificate, error) {
		c, err := get(h)
		if err != nil || len(c.Certificate) <= 1 {
			return c, err
		}
		mu.Lock()
		defer mu.Unlock()
		if c != from {
			l := *c
			l.Certificate = c.Certificate[:1:1]
			from, leaf = c, &l
		}
		return leaf, nil
	}
}
