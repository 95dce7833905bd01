package certificate

import (
	"bytes"
	"context"
	"crypto"
	"crypto/sha256"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/keylock"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/store"
)

// ProxyState is where a proxy is in its life.
type ProxyState string

// The proxy states: unclaimed (issued, never connected), claimed (has
// connected to xDS), revoked (refused from now on).
const (
	StateUnclaimed ProxyState = "unclaimed"
	StateClaimed   ProxyState = "claimed"
	StateRevoked   ProxyState = "revoked"
)

// ProxyRecord is what the server keeps about one enrolled proxy.
type ProxyRecord struct {
	CN             string              `json:"cn"`
	Service        mesh.MeshService    `json:"service"`
	ServiceAccount mesh.ServiceAccount `json:"serviceAccount"`
	State          ProxyState          `json:"state"`
	// Serial of the current certificate, lower-case hex.
	Serial  string    `json:"serial"`
	Issued  time.Time `json:"issued"`
	Expires time.Time `json:"expires"`
	// LastSeen is when the proxy first connected or last renewed its
	// certificate: written only with a change the record needs anyway,
	// never per connection (whether it is connected now is the xDS
	// server's to say).
	LastSeen time.Time `json:"lastSeen,omitzero"`
	// Overlap is the one earlier certificate still accepted (the renewal
	// overlap: the certificate the proxy renewed with, which it keeps
	// using until it has switched to the current one). Every other
	// certificate of the proxy is refused. Nil when there is none or it
	// expired.
	Overlap *OverlapCertificate `json:"overlap,omitempty"`
	// KeySHA256 is the hex SHA-256 of the current certificate's public
	// key (its DER SubjectPublicKeyInfo), written by a renewal: a renewal
	// with the overlap certificate is refused unless it asks again for
	// this key (the proxy did not get the answer; see RenewProxy). Empty
	// for a certificate from enrollment.
	KeySHA256 string `json:"keySHA256,omitempty"`
	// Version is the store version the record was read at (not stored):
	// ClaimVerifiedProxy writes the claim of a record VerifyProxyChain
	// returned on condition that it is still at this version, without
	// reading it again.
	Version uint64 `json:"-"`
}

// OverlapCertificate names a proxy's earlier certificate that is still
// accepted until it expires.
type OverlapCertificate struct {
	Serial  string    `json:"serial"`
	Expires time.Time `json:"expires"`
}

// proxyEntry is the stored form of a record. Previous is only read: the
// records of earlier versions kept every replaced certificate there, an
// unbounded list; decodeProxy keeps the newest unexpired one as Overlap.
type proxyEntry struct {
	ProxyRecord
	Previous []OverlapCertificate `json:"previous,omitempty"`
}

// decodeProxy decodes a stored record, turning an old record's list of
// earlier certificates into at most one overlap certificate.
func decodeProxy(raw []byte) (proxyEntry, error) {
	if e, ok := decodeProxyFast(raw); ok {
		return e, nil
	}
	var e proxyEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		return proxyEntry{}, err
	}
	for _, p := range e.Previous {
		if e.Overlap == nil || p.Expires.After(e.Overlap.Expires) {
			e.Overlap = &p
		}
	}
	e.Previous = nil
	return e, nil
}

// withoutExpiredOverlap returns r without its overlap certificate if that
// has expired at now, for listing what is still valid.
func withoutExpiredOverlap(r ProxyRecord, now time.Time) ProxyRecord {
	if r.Overlap != nil && !now.Before(r.Overlap.Expires) {
		r.Overlap = nil
	}
	return r
}

// The renewal rate bound: a proxy may renew once its current certificate
// is minRenewalFraction of its lifetime old, or maxMinRenewalAge old,
// whichever comes first. osm-agent renews at two thirds of the lifetime,
// well after; a renewal loop (or a stolen key) gets at most one
// certificate an hour. See renewableAt.
const (
	minRenewalFraction = 10 // a tenth of the lifetime
	maxMinRenewalAge   = time.Hour
)

// renewableAt returns when the proxy may renew its current certificate.
func (e *proxyEntry) renewableAt() time.Time {
	age := min(e.Expires.Sub(e.Issued)/minRenewalFraction, maxMinRenewalAge)
	return e.Issued.Add(max(age, 0))
}

// ErrTooEarly: a renewal came while the current certificate is younger
// than the minimum renewal age. The error is a *TooEarlyError, which says
// when renewal is allowed.
var ErrTooEarly = errors.New("renewal too early")

// TooEarlyError refuses a renewal that came too early.
type TooEarlyError struct {
	CN      string
	Serial  string    // the current certificate
	Issued  time.Time // when it was issued
	Allowed time.Time // when the proxy may renew
}

func (e *TooEarlyError) Error() string {
	return fmt.Sprintf("proxy %s: current certificate %s was issued at %s; renewal is allowed from %s (a proxy renews at most once per %s or tenth of its certificate lifetime)",
		e.CN, e.Serial, e.Issued.UTC().Format(time.RFC3339), e.Allowed.UTC().Format(time.RFC3339), maxMinRenewalAge)
}

// Unwrap makes the error match ErrTooEarly.
func (e *TooEarlyError) Unwrap() error { return ErrTooEarly }

// RetryAt returns when renewal is allowed.
func (e *TooEarlyError) RetryAt() time.Time { return e.Allowed }

// ErrNotCurrent: a renewal presented the proxy's overlap certificate, the
// one an earlier renewal replaced. The error is a *NotCurrentError.
var ErrNotCurrent = errors.New("renewal with a certificate that is not current")

// NotCurrentError refuses a renewal with the overlap certificate: it stays
// valid for connections until it expires, but only the current
// certificate renews. Otherwise whoever holds an earlier, rotated key
// could renew with it and so revoke the machine's newest certificate.
type NotCurrentError struct {
	CN      string
	Serial  string    // the certificate presented, the overlap
	Expires time.Time // when it expires
	Current string    // the proxy's current certificate
}

func (e *NotCurrentError) Error() string {
	return fmt.Sprintf("proxy %s: certificate %s was replaced by a renewal (the current certificate is %s); it stays valid for connections until %s, but only the current certificate renews: the machine's current certificate must renew (an agent that did not get its renewal's answer asks again with the same key; otherwise enroll the machine again with a new join token)",
		e.CN, e.Serial, e.Current, e.Expires.UTC().Format(time.RFC3339))
}

// Unwrap makes the error match ErrNotCurrent.
func (e *NotCurrentError) Unwrap() error { return ErrNotCurrent }

// CurrentSerial returns the serial of the proxy's current certificate.
func (e *NotCurrentError) CurrentSerial() string { return e.Current }

// keySHA256 returns ProxyRecord.KeySHA256 of pub.
func keySHA256(pub crypto.PublicKey) (string, error) {
	der, err := x509.MarshalPKIXPublicKey(pub)
	if err != nil {
		return "", fmt.Errorf("encode public key: %w", err)
	}
	sum := sha256.Sum256(der)
	return hex.EncodeToString(sum[:]), nil
}

// proxyKnown is what this replica last saw of a proxy record, to announce
// changes once and to find the records past their retention.
type proxyKnown struct {
	version uint64
	state   ProxyState
	serial  string
	// lastExpiry is when the last of the certificates the record vouches
	// for expires, in Unix seconds rounded up.
	lastExpiry int64
	// expires is when the current certificate expires, in Unix seconds
	// (for the expiry metric).
	expires int64
}

// lastExpiry returns when the last certificate e vouches for expires: the
// current one's expiry or, when a MeshConfig shortened the lifetime at a
// renewal, an earlier one's.
func (e *proxyEntry) lastExpiry() time.Time {
	last := e.Expires
	if e.Overlap != nil && e.Overlap.Expires.After(last) {
		last = e.Overlap.Expires
	}
	return last
}

func proxyKey(cn string) string { return proxyPrefix + cn }

// ProxySPIFFEID returns the URI SAN of a proxy certificate:
// spiffe://<trust-domain>/ns/<namespace>/sa/<sa>/proxy/<proxy-uuid>.
func (m *Manager) ProxySPIFFEID(sa mesh.ServiceAccount, id mesh.ProxyIdentity) string {
	return sa.SPIFFEID(m.opts.TrustDomain) + "/proxy/" + id.UUID.String()
}

// checkCSR parses a DER CSR, refuses a key that meshapi.CheckKey (the key
// policy) refuses, and verifies the signature. Only the public key is
// used: the server decides the subject and SANs.
func checkCSR(der []byte) (crypto.PublicKey, error) {
	csr, err := x509.ParseCertificateRequest(der)
	if err != nil {
		return nil, fmt.Errorf("%w: not a DER PKCS#10 request: %v", ErrInvalidCSR, err)
	}
	if err := meshapi.CheckKey(csr.PublicKey); err != nil {
		return nil, fmt.Errorf("%w: %w", ErrInvalidCSR, err)
	}
	if err := csr.CheckSignature(); err != nil {
		return nil, fmt.Errorf("%w: signature does not verify (the request was altered, or signed by another key): %v", ErrInvalidCSR, err)
	}
	return csr.PublicKey, nil
}

// signProxy issues a proxy certificate for pub.
func (m *Manager) signProxy(id mesh.ProxyIdentity, sa mesh.ServiceAccount, pub crypto.PublicKey, now time.Time) (*x509.Certificate, []byte, error) {
	u, err := url.Parse(m.ProxySPIFFEID(sa, id))
	if err != nil {
		return nil, nil, fmt.Errorf("SPIFFE ID of proxy %s: %w", id, err)
	}
	cert, certPEM, err := m.ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: id.CommonName(), Organization: []string{"osm-vm"}},
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    now.Add(time.Duration(m.proxyLife.Load())),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{u},
	}, pub)
	if err == nil {
		// The proxy's first connection need not check what was just signed.
		m.verified.add([]*x509.Certificate{cert, m.ca.cert}, now)
	}
	return cert, certPEM, err
}

// IssueProxy enrolls a new proxy of svc running as sa: it picks a fresh
// proxy UUID, issues a certificate for the CSR's public key with common
// name <proxy-uuid>.<service>.<namespace> and the proxy SPIFFE ID, and
// stores an unclaimed record. ops commit in the same transaction as the
// record (the enrollment code spends its join token there); if one of
// their version conditions fails nothing is stored and the error wraps
// ErrConflict. A bad or weak CSR is refused with an error wrapping
// ErrInvalidCSR.
func (m *Manager) IssueProxy(ctx context.Context, csrDER []byte, svc mesh.MeshService, sa mesh.ServiceAccount, ops ...store.Op) ([]byte, string, error) {
	if err := svc.Validate(); err != nil {
		return nil, "", fmt.Errorf("issue proxy certificate: %w", err)
	}
	if err := validateServiceAccount(sa); err != nil {
		return nil, "", fmt.Errorf("issue proxy certificate: %w", err)
	}
	pub, err := checkCSR(csrDER)
	if err != nil {
		return nil, "", fmt.Errorf("issue proxy certificate for %s: %w", svc, err)
	}
	id := mesh.NewProxyIdentity(svc)
	cn := id.CommonName()
	if _, err := mesh.ParseProxyIdentity(cn); err != nil {
		return nil, "", fmt.Errorf("issue proxy certificate: %w", err)
	}
	now := m.now()
	cert, certPEM, err := m.signProxy(id, sa, pub, now)
	if err != nil {
		return nil, "", err
	}
	e := proxyEntry{ProxyRecord: ProxyRecord{
		CN: cn, Service: svc, ServiceAccount: sa, State: StateUnclaimed,
		Serial: serialString(cert.SerialNumber), Issued: now, Expires: cert.NotAfter,
	}}
	val, err := encodeProxy(e)
	if err != nil {
		return nil, "", fmt.Errorf("encode proxy record %s: %w", cn, err)
	}
	ok, err := m.st.Txn(ctx, slices.Concat([]store.Op{store.Set(proxyKey(cn), 0, val)}, ops)...)
	if err != nil {
		return nil, "", fmt.Errorf("store proxy record %s: %w", cn, err)
	}
	if !ok {
		return nil, "", fmt.Errorf("issue proxy certificate for %s: a version condition failed (reload and retry): %w", svc, ErrConflict)
	}
	m.log.Info("issued proxy certificate", "cn", cn, "serial", e.Serial, "expires", e.Expires)
	m.countIssued("proxy")
	m.observeProxy(ctx, cn)
	m.prepareServiceCertificate(sa)
	return certPEM, cn, nil
}

// prepareServiceCertificate asks Run to issue sa's service certificate
// now, when this replica holds none, so that it is there when the proxy
// just enrolled connects: the proxy's first configuration then waits for
// no signature and no store write, and a fleet's first connections make
// none. It does nothing without a Run (RequestServiceCertificate would
// issue in the caller's goroutine).
func (m *Manager) prepareServiceCertificate(sa mesh.ServiceAccount) { m.heldOrQueued(sa) }

// RenewProxy issues a new certificate for the proxy that presented peer (a
// certificate the TLS layer verified), for the CSR's key, with the same
// subject and SANs. Only the current certificate renews. It is refused
// when the proxy is revoked (ErrRevoked), when peer has expired
// (ErrExpired), when peer is neither the proxy's current certificate nor
// its overlap certificate (ErrRevoked), when peer is the overlap
// certificate (a *NotCurrentError, matching ErrNotCurrent), and while the
// current certificate is younger than the minimum renewal age (a
// *TooEarlyError, matching ErrTooEarly, saying when renewal is allowed).
// The certificate peer stays valid as the overlap until it expires; any
// other earlier certificate is refused from then on, so a record holds at
// most two certificates however often the proxy renews.
//
// One renewal with the overlap is accepted: when the CSR's key is the
// current certificate's, the proxy is asking again for the renewal whose
// answer it did not get (only it holds that key: the CSR's signature
// proves it). It gets a new certificate for that key at once, which
// becomes the current one; the overlap stays as it was.
//
// Renewals of one proxy are serialised in this replica; a record changed
// meanwhile (a claim, another replica) is read again and the renewal
// retried, with a jittered backoff, up to renewAttempts times.
func (m *Manager) RenewProxy(ctx context.Context, peer *x509.Certificate, csrDER []byte) (_ []byte, err error) {
	defer func() { m.countRenewal(err) }()
	if peer == nil {
		return nil, fmt.Errorf("renew proxy certificate: no client certificate presented")
	}
	cn := peer.Subject.CommonName
	pub, err := checkCSR(csrDER)
	if err != nil {
		return nil, fmt.Errorf("renew proxy certificate %s: %w", cn, err)
	}
	id, err := mesh.ParseProxyIdentity(cn)
	if err != nil {
		return nil, fmt.Errorf("renew proxy certificate: %w", err)
	}
	keyHash, err := keySHA256(pub)
	if err != nil {
		return nil, fmt.Errorf("renew proxy certificate %s: %w", cn, err)
	}
	unlock, err := m.renewals.Lock(ctx, cn, 0)
	if err != nil {
		return nil, fmt.Errorf("renew proxy certificate %s: %w", cn, err)
	}
	defer unlock()
	for attempt := 1; attempt <= renewAttempts; attempt++ {
		if attempt > 1 && !keylock.Backoff(ctx, attempt-1) {
			return nil, fmt.Errorf("renew proxy certificate %s: %w", cn, ctx.Err())
		}
		e, ver, err := m.loadProxy(ctx, cn)
		if err != nil {
			return nil, fmt.Errorf("renew proxy certificate: %w", err)
		}
		now := m.now()
		if err := m.checkPeer(e, peer, false, now); err != nil {
			return nil, fmt.Errorf("renew proxy certificate: %w", err)
		}
		again := false // asking again for the last renewal
		if serial := serialString(peer.SerialNumber); serial != e.Serial {
			// checkPeer accepted it: peer is the overlap certificate.
			if e.KeySHA256 == "" || e.KeySHA256 != keyHash {
				return nil, &NotCurrentError{CN: cn, Serial: serial, Expires: peer.NotAfter, Current: e.Serial}
			}
			again = true
		} else if at := e.renewableAt(); now.Before(at) {
			return nil, &TooEarlyError{CN: cn, Serial: e.Serial, Issued: e.Issued, Allowed: at}
		}
		cert, certPEM, err := m.signProxy(id, e.ServiceAccount, pub, now)
		if err != nil {
			return nil, err
		}
		if !again {
			// The overlap is the certificate the proxy renewed with: the
			// one it holds and keeps using until it switches to the new
			// one.
			e.Overlap = &OverlapCertificate{Serial: serialString(peer.SerialNumber), Expires: peer.NotAfter}
		}
		e.Serial, e.Issued, e.Expires, e.KeySHA256 = serialString(cert.SerialNumber), now, cert.NotAfter, keyHash
		e.LastSeen = now // the record is written anyway: a free sign of life
		val, err := encodeProxy(e)
		if err != nil {
			return nil, fmt.Errorf("encode proxy record %s: %w", cn, err)
		}
		ok, err := m.st.Txn(ctx, store.Set(proxyKey(cn), ver, val))
		if err != nil {
			return nil, fmt.Errorf("store proxy record %s: %w", cn, err)
		}
		if ok {
			m.log.Info("renewed proxy certificate", "cn", cn, "serial", e.Serial, "expires", e.Expires, "overlap", e.Overlap.Serial, "askedAgain", again)
			m.countIssued("proxy")
			m.observeProxy(ctx, cn)
			return certPEM, nil
		}
	}
	return nil, fmt.Errorf("renew proxy certificate %s: the record changed %d times while renewing (another replica or a claim writes it); try again: %w", cn, renewAttempts, ErrConflict)
}

// renewAttempts bounds the tries of one renewal whose record keeps
// changing. Renewals of a proxy are serialised in a replica, so only
// claims and other replicas change it meanwhile.
const renewAttempts = 32

// checkPeer checks a presented certificate against the proxy's record.
func (m *Manager) checkPeer(e proxyEntry, peer *x509.Certificate, signed bool, now time.Time) error {
	serial := serialString(peer.SerialNumber)
	if !signed {
		if err := peer.CheckSignatureFrom(m.ca.cert); err != nil {
			return fmt.Errorf("certificate %s of proxy %s was not issued by this mesh's CA: %w", serial, e.CN, err)
		}
	}
	if e.State == StateRevoked {
		return fmt.Errorf("proxy %s: %w (enroll the machine again with a new join token)", e.CN, ErrRevoked)
	}
	if now.After(peer.NotAfter) {
		return fmt.Errorf("certificate %s of proxy %s expired at %s: %w (enroll the machine again with a new join token)", serial, e.CN, peer.NotAfter.UTC().Format(time.RFC3339), ErrExpired)
	}
	if serial == e.Serial {
		return nil
	}
	if o := e.Overlap; o != nil && o.Serial == serial && now.Before(o.Expires) {
		return nil
	}
	return fmt.Errorf("certificate %s is not a current certificate of proxy %s (it was replaced by two renewals or more): %w", serial, e.CN, ErrRevoked)
}

// VerifyProxy checks a peer certificate the TLS layer verified against the
// records: the CN is a known proxy, not revoked, the certificate has not
// expired, was issued by the mesh CA, and is the proxy's current
// certificate or an earlier one that has not expired (renewal overlap).
func (m *Manager) VerifyProxy(ctx context.Context, peer *x509.Certificate) (ProxyRecord, error) {
	return m.verifyProxy(ctx, peer, false)
}

// VerifyProxyChain is VerifyProxy of chain[0], where chain is one of the
// chains crypto/tls verified the peer with (tls.ConnectionState's
// VerifiedChains). When the chain is the peer and this mesh's CA, the TLS
// layer has checked the signature and it is not checked again: an ECDSA
// verification, ~5% of osm-server's CPU in a reconnect storm.
func (m *Manager) VerifyProxyChain(ctx context.Context, chain []*x509.Certificate) (ProxyRecord, error) {
	if len(chain) == 0 {
		return ProxyRecord{}, fmt.Errorf("verify proxy: no client certificate presented")
	}
	signed := len(chain) == 2 && chain[1].Equal(m.ca.cert)
	return m.verifyProxy(ctx, chain[0], signed)
}

func (m *Manager) verifyProxy(ctx context.Context, peer *x509.Certificate, signed bool) (ProxyRecord, error) {
	if peer == nil {
		return ProxyRecord{}, fmt.Errorf("verify proxy: no client certificate presented")
	}
	e, _, err := m.loadProxy(ctx, peer.Subject.CommonName)
	if err != nil {
		return ProxyRecord{}, fmt.Errorf("verify proxy: %w", err)
	}
	if err := m.checkPeer(e, peer, signed, m.now()); err != nil {
		return ProxyRecord{}, fmt.Errorf("verify proxy: %w", err)
	}
	return m.withPendingClaim(e.ProxyRecord), nil
}

// Proxy returns the record of the proxy cn, or an error wrapping
// ErrNotFound. A claim this replica has not written yet is included.
func (m *Manager) Proxy(ctx context.Context, cn string) (ProxyRecord, error) {
	e, _, err := m.loadProxy(ctx, cn)
	if err != nil {
		return ProxyRecord{}, err
	}
	return withoutExpiredOverlap(m.withPendingClaim(e.ProxyRecord), m.now()), nil
}

// ListProxies returns every proxy record, ordered by CN, with the claims
// this replica has not written yet.
func (m *Manager) ListProxies(ctx context.Context) ([]ProxyRecord, error) {
	kvs, err := m.st.List(ctx, proxyPrefix)
	if err != nil {
		return nil, fmt.Errorf("list proxy records: %w", err)
	}
	out := make([]ProxyRecord, 0, len(kvs))
	now := m.now()
	for _, kv := range kvs {
		e, err := decodeProxy(kv.Value)
		if err != nil {
			m.log.Warn("skipping undecodable proxy record", "key", kv.Key, "err", err)
			continue
		}
		e.Version = kv.Version
		out = append(out, withoutExpiredOverlap(e.ProxyRecord, now))
	}
	m.claimMu.Lock()
	for i := range out {
		e := proxyEntry{ProxyRecord: out[i]}
		m.applyPendingClaimLocked(&e)
		out[i] = e.ProxyRecord
	}
	m.claimMu.Unlock()
	slices.SortFunc(out, func(a, b ProxyRecord) int { return strings.Compare(a.CN, b.CN) })
	return out, nil
}

// RevokeProxy marks the proxy cn revoked and announces ProxyRevoked: its
// certificates are refused from now on and its streams should be closed.
// Revoking a revoked proxy is not an error.
func (m *Manager) RevokeProxy(ctx context.Context, cn string) error {
	err := m.updateProxy(ctx, cn, "revoke", func(e *proxyEntry, _ time.Time) error {
		if e.State == StateRevoked {
			return errUnchanged
		}
		e.State = StateRevoked
		return nil
	})
	if err == nil {
		m.countRevocation()
		// A pending claim would be dropped when written; drop it now.
		m.claimMu.Lock()
		delete(m.claims, cn)
		m.claimMu.Unlock()
	}
	return err
}

// errUnchanged from a change function means there is nothing to write.
var errUnchanged = errors.New("unchanged")

// errUndecodable is in the error of a proxy record that does not decode.
var errUndecodable = errors.New("does not decode")

// updateProxy applies change to the record with a versioned write,
// retrying when the record changed meanwhile.
func (m *Manager) updateProxy(ctx context.Context, cn, what string, change func(*proxyEntry, time.Time) error) error {
	for range 10 {
		e, ver, err := m.loadProxy(ctx, cn)
		if err != nil {
			return fmt.Errorf("%s proxy: %w", what, err)
		}
		switch err := change(&e, m.now()); {
		case errors.Is(err, errUnchanged):
			return nil
		case err != nil:
			return fmt.Errorf("%s proxy: %w", what, err)
		}
		val, err := encodeProxy(e)
		if err != nil {
			return fmt.Errorf("encode proxy record %s: %w", cn, err)
		}
		ok, err := m.st.Txn(ctx, store.Set(proxyKey(cn), ver, val))
		if err != nil {
			return fmt.Errorf("%s proxy %s: %w", what, cn, err)
		}
		if ok {
			m.observeProxy(ctx, cn)
			return nil
		}
	}
	return fmt.Errorf("%s proxy %s: the record keeps changing: %w", what, cn, ErrConflict)
}

func (m *Manager) loadProxy(ctx context.Context, cn string) (proxyEntry, uint64, error) {
	if cn == "" || strings.Contains(cn, "/") {
		return proxyEntry{}, 0, fmt.Errorf("proxy %q: %w", cn, ErrNotFound)
	}
	raw, ver, err := m.st.Get(ctx, proxyKey(cn))
	if err != nil {
		return proxyEntry{}, 0, fmt.Errorf("load proxy record %s: %w", cn, err)
	}
	if ver == 0 {
		return proxyEntry{}, 0, fmt.Errorf("proxy %s: %w (was it enrolled on this mesh?)", cn, ErrNotFound)
	}
	e, err := decodeProxy(raw)
	if err != nil {
		return proxyEntry{}, 0, fmt.Errorf("proxy record %s %w: %w", cn, errUndecodable, err)
	}
	e.Version = ver
	return e, ver, nil
}

// observeProxy reads the proxy's record after a local write and announces
// what changed, unless a sync announced it already.
func (m *Manager) observeProxy(ctx context.Context, cn string) {
	m.observeWritten(ctx, cn, nil, nil)
}

// observeWritten is observeProxy after a write of val, the encoding of
// *written: a record read back as val is not decoded again (nil written:
// always decoded).
func (m *Manager) observeWritten(ctx context.Context, cn string, written *proxyEntry, val []byte) {
	raw, ver, err := m.st.Get(ctx, proxyKey(cn))
	if err != nil || ver == 0 {
		m.followStore() // Run's listing catches up
		return
	}
	var e proxyEntry
	if written != nil && bytes.Equal(raw, val) {
		e = *written
	} else if e, err = decodeProxy(raw); err != nil {
		m.followStore()
		return
	}
	m.mu.Lock()
	m.observeProxyLocked(&e, ver, true)
	m.mu.Unlock()
}

// observeProxyLocked records a proxy record seen at version ver and, when
// announce is set, announces its changes. Older observations are ignored.
func (m *Manager) observeProxyLocked(e *proxyEntry, ver uint64, announce bool) {
	r := &e.ProxyRecord
	old, seen := m.proxies[r.CN]
	if seen && ver <= old.version {
		return
	}
	last := e.lastExpiry()
	lastSec := last.Unix()
	if last.Nanosecond() != 0 {
		lastSec++
	}
	m.proxies[r.CN] = proxyKnown{version: ver, state: r.State, serial: r.Serial, lastExpiry: lastSec, expires: r.Expires.Unix()}
	if !announce {
		return
	}
	a := Announcement{ProxyCN: r.CN, ServiceAccount: r.ServiceAccount}
	if !seen {
		a.Kind = ProxyIssued
		m.announceLocked(a)
	} else if old.serial != r.Serial {
		a.Kind = ProxyRenewed
		m.announceLocked(a)
	}
	if r.State != old.state || !seen {
		switch r.State {
		case StateClaimed:
			a.Kind = ProxyClaimed
			m.announceLocked(a)
		case StateRevoked:
			a.Kind = ProxyRevoked
			m.announceLocked(a)
		}
	}
}

// syncProxies reloads every proxy record, announces changes and forgets
// the records deleted (prune.go) by this replica or another.
func (m *Manager) syncProxies(ctx context.Context, announce bool) error {
	// A large fleet has many records and few change: list versions only,
	// and read the records this replica has not seen at their version.
	// The first listing (the start) reads them all: list them with their
	// values at once (on Consul a listing of versions moves the values
	// too).
	m.mu.Lock()
	withValues := !m.proxiesListed
	m.mu.Unlock()
	list := m.st.ListVersions
	if withValues {
		list = m.st.List
	}
	kvs, err := list(ctx, proxyPrefix)
	if err != nil {
		return fmt.Errorf("list proxy records: %w", err)
	}
	var changed []store.KV
	var missing []string // known here, not listed
	m.mu.Lock()
	listedKnown := 0
	undecodable := m.undecodable
	m.undecodable = map[string]uint64{} // those still listed at the same version stay
	for _, kv := range kvs {
		if v, bad := undecodable[kv.Key]; bad && v == kv.Version {
			m.undecodable[kv.Key] = v // reported once; read again when rewritten
			continue
		}
		old, seen := m.proxies[strings.TrimPrefix(kv.Key, proxyPrefix)]
		if seen {
			listedKnown++
		}
		if !seen || kv.Version > old.version {
			changed = append(changed, kv)
		}
	}
	if listedKnown < len(m.proxies) {
		// Some record known here was not listed: deleted, unless it was
		// created and observed after the listing (the read below tells).
		listed := make(map[string]struct{}, len(kvs))
		for _, kv := range kvs {
			listed[strings.TrimPrefix(kv.Key, proxyPrefix)] = struct{}{}
		}
		for cn := range m.proxies {
			if _, ok := listed[cn]; !ok {
				missing = append(missing, cn)
			}
		}
	}
	m.mu.Unlock()
	// The changed records first, then those missing from the listing.
	var keys []string
	var read []store.KV
	if withValues {
		read = changed
	} else {
		for _, kv := range changed {
			keys = append(keys, kv.Key)
		}
	}
	for _, cn := range missing {
		keys = append(keys, proxyKey(cn))
	}
	if len(keys) > 0 {
		r, err := readKeys(ctx, m.st, proxyPrefix, keys, len(kvs))
		if err != nil {
			return fmt.Errorf("read proxy records: %w", err)
		}
		read = append(read, r...)
	}
	var gone []string
	for i, kv := range read {
		if kv.Version == 0 {
			gone = append(gone, strings.TrimPrefix(kv.Key, proxyPrefix)) // deleted since the listing
			continue
		}
		if i >= len(changed) {
			continue // known here and not listed, but there: created and observed after the listing
		}
		e, err := decodeProxy(kv.Value)
		if err != nil {
			m.log.Warn("skipping a proxy record that does not decode: the proxy is refused until it enrolls again; the record is read again when rewritten", "key", kv.Key, "err", err)
			m.mu.Lock()
			m.undecodable[kv.Key] = kv.Version
			m.mu.Unlock()
			continue
		}
		m.mu.Lock()
		m.observeProxyLocked(&e, kv.Version, announce)
		m.mu.Unlock()
	}
	m.forgetProxies(gone)
	m.mu.Lock()
	m.proxiesListed = true
	m.mu.Unlock()
	return nil
}
