package certificate

import (
	"bytes"
	"crypto/sha256"
	"crypto/x509"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// VerifyClient checks the certificates a TLS client presented (the leaf
// first, as crypto/tls parsed them) as crypto/tls's
// RequireAndVerifyClientCert does with the mesh CA's pool: they chain to
// the mesh root, every certificate of the chain is within its validity
// period at the manager's clock, and the leaf may authenticate a client.
// It returns the chain, the leaf first.
//
// A leaf whose exact bytes this replica issued (IssueProxy, RenewProxy) or
// verified before is not checked against the root again, only its chain's
// validity period: a fleet reconnecting after a restart or a failover
// would otherwise cost an ECDSA verification per proxy, about a tenth of
// osm-server's CPU in a reconnect storm. What is remembered is a fact about
// the certificate's bytes, not about a connection: the TLS handshake still
// checks that the peer holds the certificate's key, and VerifyProxyChain
// still checks the proxy's record (revocation, renewals).
func (m *Manager) VerifyClient(certs []*x509.Certificate) ([]*x509.Certificate, error) {
	if len(certs) == 0 || certs[0] == nil {
		return nil, errors.New("no client certificate presented: connect with the proxy certificate from enrollment")
	}
	leaf, now := certs[0], m.now()
	if chain, ok := m.verified.lookup(leaf, now); ok {
		return chain, nil
	}
	opts := x509.VerifyOptions{Roots: m.ca.pool, CurrentTime: now, KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}
	if len(certs) > 1 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range certs[1:] {
			opts.Intermediates.AddCert(c)
		}
	}
	chains, err := leaf.Verify(opts)
	if err != nil {
		return nil, fmt.Errorf("client certificate %s (%q) is not verified by this mesh's CA: %w", serialString(leaf.SerialNumber), leaf.Subject.CommonName, err)
	}
	m.verified.add(chains[0], now)
	return chains[0], nil
}

// VerifyResumedClient is VerifyClient for a resumed TLS session, whose
// certificates come from a session ticket and not from the client: a
// ticket only a server holding the mesh's ticket keys could have made (they
// are kept in the store with the CA's own key; see internal/sessionticket),
// after VerifyClient had accepted the certificate in the handshake that
// made the session. What may have changed since is checked again: every
// certificate of the chain is within its validity period, the leaf may
// authenticate a client, and it was issued by this mesh's CA as it is now
// (its issuer's name and key identifier are the CA's): a ticket from
// before the CA was replaced is refused. The CA's signature on the leaf is
// not checked again, which after a restart or a failover would cost an
// ECDSA verification per reconnecting proxy (an eighth of osm-server's
// CPU in a restart storm of resumed sessions).
func (m *Manager) VerifyResumedClient(certs []*x509.Certificate) ([]*x509.Certificate, error) {
	if len(certs) == 0 || certs[0] == nil {
		return nil, errors.New("no client certificate in the resumed session: connect with the proxy certificate from enrollment")
	}
	leaf, now := certs[0], m.now()
	if chain, ok := m.verified.lookup(leaf, now); ok {
		return chain, nil
	}
	ca := m.ca.cert
	if !bytes.Equal(leaf.RawIssuer, ca.RawSubject) || len(ca.SubjectKeyId) == 0 || !bytes.Equal(leaf.AuthorityKeyId, ca.SubjectKeyId) {
		return nil, fmt.Errorf("client certificate %s (%q) of a resumed session was not issued by this mesh's CA", serialString(leaf.SerialNumber), leaf.Subject.CommonName)
	}
	chain := []*x509.Certificate{leaf, ca}
	for _, c := range chain {
		if now.Before(c.NotBefore) || now.After(c.NotAfter) {
			return nil, fmt.Errorf("client certificate %s (%q) of a resumed session: %q is valid from %s to %s, not at %s", serialString(leaf.SerialNumber), leaf.Subject.CommonName,
				c.Subject.CommonName, c.NotBefore.UTC().Format(time.RFC3339), c.NotAfter.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
		}
	}
	if len(leaf.ExtKeyUsage) > 0 && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageClientAuth) && !slices.Contains(leaf.ExtKeyUsage, x509.ExtKeyUsageAny) {
		return nil, fmt.Errorf("client certificate %s (%q) of a resumed session may not authenticate a client", serialString(leaf.SerialNumber), leaf.Subject.CommonName)
	}
	m.verified.add(chain, now)
	return chain, nil
}

// maxVerifiedCerts bounds what verifiedCerts remembers (about 100 bytes
// each); past it, it starts again empty.
const maxVerifiedCerts = 1 << 18

// verifiedCerts remembers the certificates known to chain to the mesh
// root, by the SHA-256 of their DER (see Manager.VerifyClient), until the
// earliest expiry of their chain. Expired entries are swept whenever the
// number of entries has doubled since the last sweep or passed
// maxVerifiedCerts.
type verifiedCerts struct {
	mu    sync.Mutex
	certs map[[sha256.Size]byte]verifiedCert
	swept int // len(certs) after the last sweep
	// issuers is the chain after the leaf last remembered, shared by
	// every entry with the same issuers (all of them, with one root).
	issuers []*x509.Certificate
}

type verifiedCert struct {
	notBefore, notAfter time.Time           // the chain's common validity period
	issuers             []*x509.Certificate // the chain after the leaf
}

// lookup returns leaf's remembered chain, if leaf is remembered and now is
// within the chain's validity period.
func (v *verifiedCerts) lookup(leaf *x509.Certificate, now time.Time) ([]*x509.Certificate, bool) {
	key := sha256.Sum256(leaf.Raw)
	v.mu.Lock()
	e, ok := v.certs[key]
	v.mu.Unlock()
	if !ok || now.Before(e.notBefore) || now.After(e.notAfter) {
		return nil, false
	}
	chain := make([]*x509.Certificate, 0, 1+len(e.issuers))
	return append(append(chain, leaf), e.issuers...), true
}

// add remembers chain (the leaf first), verified at now. It keeps the
// issuers, never the parsed leaf: chain[1:] shares an array with the leaf,
// and remembering it kept every issued proxy certificate parsed in memory
// (2.4 KiB each, 10% of osm-server's heap at 10,000 proxies) until it
// expired.
func (v *verifiedCerts) add(chain []*x509.Certificate, now time.Time) {
	e := verifiedCert{notBefore: chain[0].NotBefore, notAfter: chain[0].NotAfter}
	for _, c := range chain[1:] {
		if c.NotBefore.After(e.notBefore) {
			e.notBefore = c.NotBefore
		}
		if c.NotAfter.Before(e.notAfter) {
			e.notAfter = c.NotAfter
		}
	}
	key := sha256.Sum256(chain[0].Raw)
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.certs == nil {
		v.certs = map[[sha256.Size]byte]verifiedCert{}
	}
	if !slices.Equal(v.issuers, chain[1:]) {
		v.issuers = slices.Clone(chain[1:])
	}
	e.issuers = v.issuers
	v.certs[key] = e
	if len(v.certs) < 2*max(v.swept, 1024) && len(v.certs) <= maxVerifiedCerts {
		return
	}
	for k, e := range v.certs {
		if now.After(e.notAfter) {
			delete(v.certs, k)
		}
	}
	if len(v.certs) > maxVerifiedCerts {
		clear(v.certs)
	}
	v.swept = len(v.certs)
}
