package certificate

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"maps"
	"net/url"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// serviceRecord is the stored form of a service certificate.
type serviceRecord struct {
	CommonName     CommonName          `json:"commonName"`
	ServiceAccount mesh.ServiceAccount `json:"serviceAccount"`
	CertPEM        string              `json:"certPEM"`
	KeyPEM         string              `json:"keyPEM"`
	Serial         string              `json:"serial"`
	Issued         time.Time           `json:"issued"`
	Expires        time.Time           `json:"expires"`
	// Lifetime is the lifetime asked for, before jitter; rotations keep it.
	// 0 is the default lifetime, as it is when each rotation happens.
	// (Records of earlier versions held the lifetime given to them under
	// "lifetime", default or not: under this name they decode as 0, so
	// their rotations follow the MeshConfig too.)
	Lifetime time.Duration `json:"askedLifetime,omitzero"`
}

// rotateAt is when less than a third of the lifetime is left.
func (r serviceRecord) rotateAt() time.Time {
	return r.Expires.Add(-r.Expires.Sub(r.Issued) / 3)
}

// serviceState is what this replica last saw of one service certificate.
type serviceState struct {
	version uint64
	rec     serviceRecord
	cert    *Certificate
}

func serviceKey(sa mesh.ServiceAccount) string {
	return servicePrefix + sa.Namespace + "/" + sa.Name
}

// ServiceCommonName returns the common name of sa's service certificate:
// <sa>.<namespace>.<trust-domain>.
func (m *Manager) ServiceCommonName(sa mesh.ServiceAccount) CommonName {
	return CommonName(sa.Name + "." + sa.Namespace + "." + m.opts.TrustDomain)
}

func validateServiceAccount(sa mesh.ServiceAccount) error {
	if err := mesh.ValidateLabel("service account namespace", sa.Namespace); err != nil {
		return err
	}
	return mesh.ValidateLabel("service account name", sa.Name)
}

// ServiceCertificate returns sa's service certificate, issuing it if there
// is none and rotating it if it is due (less than a third of its lifetime
// left). All proxies of the account, on every replica, share it.
func (m *Manager) ServiceCertificate(ctx context.Context, sa mesh.ServiceAccount) (*Certificate, error) {
	if err := validateServiceAccount(sa); err != nil {
		return nil, fmt.Errorf("service certificate: %w", err)
	}
	cn := m.ServiceCommonName(sa)
	if c := m.cachedFresh(cn); c != nil {
		return c, nil
	}
	return m.issueService(ctx, sa, 0, false)
}

// RequestServiceCertificate returns sa's service certificate without
// waiting for a store write or a signature: the one this replica holds
// (while it has not expired; Run rotates it when due). When there is none,
// it returns an error wrapping ErrPending, and Run issues it in its own
// goroutine and announces it (Issued, or Rotated for an expired one), so a
// caller that subscribed before asking learns when to ask again. While no
// Run is running it issues at once, as ServiceCertificate does.
func (m *Manager) RequestServiceCertificate(ctx context.Context, sa mesh.ServiceAccount) (*Certificate, error) {
	if err := validateServiceAccount(sa); err != nil {
		return nil, fmt.Errorf("service certificate: %w", err)
	}
	held, queued := m.heldOrQueued(sa)
	switch {
	case held != nil:
		return held, nil
	case !queued:
		return m.issueService(ctx, sa, 0, false)
	}
	return nil, fmt.Errorf("service certificate %s: %w", m.ServiceCommonName(sa), ErrPending)
}

// heldOrQueued returns sa's service certificate this replica holds, while
// it has not expired; without one it asks Run to issue it and reports
// queued, or, with no Run running, reports neither.
func (m *Manager) heldOrQueued(sa mesh.ServiceAccount) (held *Certificate, queued bool) {
	cn := m.ServiceCommonName(sa)
	m.mu.Lock()
	if s := m.services[cn]; s != nil && m.now().Before(s.rec.Expires) {
		m.mu.Unlock()
		return s.cert, false
	}
	if m.issuers == 0 {
		m.mu.Unlock()
		return nil, false
	}
	m.requested[sa] = struct{}{}
	m.mu.Unlock()
	m.wake()
	return nil, true
}

// issueRequested issues the service certificates RequestServiceCertificate
// asked for (announced by issueService); those that fail stay requested,
// for the next attempt.
func (m *Manager) issueRequested(ctx context.Context) error {
	m.mu.Lock()
	sas := slices.Collect(maps.Keys(m.requested))
	clear(m.requested)
	m.mu.Unlock()
	var errs []error
	var left []mesh.ServiceAccount
	for chunk := range slices.Chunk(sas, store.MaxTxnOps) {
		left = append(left, m.issueBatch(ctx, chunk)...)
	}
	for _, sa := range left {
		if _, err := m.issueService(ctx, sa, 0, false); err != nil {
			errs = append(errs, err)
			m.mu.Lock()
			m.requested[sa] = struct{}{}
			m.mu.Unlock()
		}
	}
	return errors.Join(errs...)
}

// issueBatch issues, in one transaction, the certificates of those of sas
// that have none or one due for rotation, and returns the service
// accounts it left to issueService: those with a certificate to observe,
// and all of them when the transaction was refused (a record changed
// meanwhile, or the batch is too large) or failed. A fleet's first
// proxies of many services so cost a few transactions (and fsyncs) rather
// than one each: 4.5% of a fresh server's CPU while a fleet of 1,000
// services connected.
func (m *Manager) issueBatch(ctx context.Context, sas []mesh.ServiceAccount) []mesh.ServiceAccount {
	if len(sas) < 2 {
		return sas
	}
	m.issueMu.Lock()
	defer m.issueMu.Unlock()
	var left []mesh.ServiceAccount
	var ops []store.Op
	var recs []serviceRecord
	for _, sa := range sas {
		key := serviceKey(sa)
		cur, ver, err := m.loadService(ctx, key)
		if err != nil {
			return sas
		}
		if cur != nil && m.now().Before(cur.rotateAt()) {
			left = append(left, sa)
			continue
		}
		var asked time.Duration // 0: the default, whatever it is at each rotation
		if cur != nil {
			asked = cur.Lifetime
		}
		rec, err := m.newServiceRecord(sa, asked)
		if err != nil {
			return sas
		}
		val, err := json.Marshal(rec)
		if err != nil {
			return sas
		}
		ops = append(ops, store.Set(key, ver, val))
		recs = append(recs, rec)
	}
	if len(ops) < 2 || store.CheckLimits(ops) != nil {
		return sas
	}
	if ok, err := m.st.Txn(ctx, ops...); err != nil || !ok {
		return sas
	}
	for i, rec := range recs {
		m.log.Info("issued service certificate", "cn", rec.CommonName, "serial", rec.Serial, "expires", rec.Expires, "batch", len(recs))
		m.countIssued("service")
		m.observeService(ctx, ops[i].Key)
	}
	return left
}

// cachedFresh returns the cached certificate for cn if it is not yet due
// for rotation.
func (m *Manager) cachedFresh(cn CommonName) *Certificate {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.services[cn]; s != nil && m.now().Before(s.rec.rotateAt()) {
		return s.cert
	}
	return nil
}

// GetCertificate returns sa's stored service certificate, without issuing
// one, or an error wrapping ErrNotFound.
func (m *Manager) GetCertificate(ctx context.Context, sa mesh.ServiceAccount) (*Certificate, error) {
	if err := validateServiceAccount(sa); err != nil {
		return nil, fmt.Errorf("get certificate: %w", err)
	}
	cn := m.ServiceCommonName(sa)
	m.mu.Lock()
	s := m.services[cn]
	m.mu.Unlock()
	if s != nil {
		return s.cert, nil
	}
	rec, _, err := m.loadService(ctx, serviceKey(sa))
	if err != nil {
		return nil, fmt.Errorf("get certificate %s: %w", cn, err)
	}
	if rec == nil {
		return nil, fmt.Errorf("certificate %s: %w", cn, ErrNotFound)
	}
	return m.serviceCertificate(*rec)
}

// RotateCertificate replaces sa's service certificate with a new one and
// announces Rotated. When another replica rotates it at the same time, its
// certificate is returned instead.
func (m *Manager) RotateCertificate(ctx context.Context, sa mesh.ServiceAccount) (*Certificate, error) {
	if err := validateServiceAccount(sa); err != nil {
		return nil, fmt.Errorf("rotate certificate: %w", err)
	}
	return m.issueService(ctx, sa, 0, true)
}

// ListCertificates returns every stored service certificate, ordered by
// common name. Proxy certificates are listed by ListProxies.
func (m *Manager) ListCertificates(ctx context.Context) ([]*Certificate, error) {
	kvs, err := m.st.List(ctx, servicePrefix)
	if err != nil {
		return nil, fmt.Errorf("list service certificates: %w", err)
	}
	var out []*Certificate
	for _, kv := range kvs {
		var rec serviceRecord
		if err := json.Unmarshal(kv.Value, &rec); err != nil {
			m.log.Warn("skipping undecodable service certificate", "key", kv.Key, "err", err)
			continue
		}
		c, err := m.serviceCertificate(rec)
		if err != nil {
			m.log.Warn("skipping unparsable service certificate", "key", kv.Key, "err", err)
			continue
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b *Certificate) int { return strings.Compare(string(a.commonName), string(b.commonName)) })
	return out, nil
}

// ReleaseCertificate deletes sa's service certificate and announces
// Released. Releasing a certificate that does not exist is not an error.
// The next ServiceCertificate call for the account issues a new one.
func (m *Manager) ReleaseCertificate(ctx context.Context, sa mesh.ServiceAccount) error {
	if err := validateServiceAccount(sa); err != nil {
		return fmt.Errorf("release certificate: %w", err)
	}
	cn := m.ServiceCommonName(sa)
	m.issueMu.Lock()
	defer m.issueMu.Unlock()
	if _, err := m.st.Txn(ctx, store.Delete(serviceKey(sa), store.AnyVersion)); err != nil {
		return fmt.Errorf("release certificate %s: %w", cn, err)
	}
	if err := m.syncServices(ctx, true); err != nil {
		m.log.Warn("reload service certificates after release", "err", err)
	}
	return nil
}

// loadService reads one service record; rec is nil when absent.
func (m *Manager) loadService(ctx context.Context, key string) (*serviceRecord, uint64, error) {
	raw, ver, err := m.st.Get(ctx, key)
	if err != nil || ver == 0 {
		return nil, ver, err
	}
	var rec serviceRecord
	if err := json.Unmarshal(raw, &rec); err != nil {
		// Overwritten by the next issuance.
		m.log.Warn("service certificate record does not decode; issuing a new one", "key", key, "err", err)
		return nil, ver, nil
	}
	return &rec, ver, nil
}

// issueService is get-or-issue (force false) or rotate (force true) for sa,
// as one versioned write; a lost race reloads and returns the winner's
// certificate when it is fresh.
func (m *Manager) issueService(ctx context.Context, sa mesh.ServiceAccount, lifetime time.Duration, force bool) (*Certificate, error) {
	cn := m.ServiceCommonName(sa)
	key := serviceKey(sa)
	m.issueMu.Lock()
	defer m.issueMu.Unlock()
	for attempt := 0; attempt < 5; attempt++ {
		cur, ver, err := m.loadService(ctx, key)
		if err != nil {
			return nil, fmt.Errorf("load certificate %s: %w", cn, err)
		}
		if force && attempt == 0 && ver == 0 {
			return nil, fmt.Errorf("rotate certificate %s: %w", cn, ErrNotFound)
		}
		if cur != nil && !force && m.now().Before(cur.rotateAt()) {
			// Another replica's (or an older) certificate: bring the
			// cache up to date so the next call is served from it.
			m.observeService(ctx, key)
			return m.serviceCertificate(*cur)
		}
		asked := lifetime // 0: the default, whatever it is at each rotation
		if asked == 0 && cur != nil {
			asked = cur.Lifetime
		}
		rec, err := m.newServiceRecord(sa, asked)
		if err != nil {
			return nil, err
		}
		val, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("encode certificate %s: %w", cn, err)
		}
		ok, err := m.st.Txn(ctx, store.Set(key, ver, val))
		if err != nil {
			return nil, fmt.Errorf("store certificate %s: %w", cn, err)
		}
		if !ok {
			// Another replica wrote it first; its certificate will do
			// unless it is due already.
			force = false
			continue
		}
		m.log.Info("issued service certificate", "cn", cn, "serial", rec.Serial, "expires", rec.Expires, "rotation", cur != nil)
		m.countIssued("service")
		if s := m.observeService(ctx, key); s != nil && s.rec.Serial == rec.Serial {
			return s.cert, nil // parsed once, by observeService
		}
		return m.serviceCertificate(rec)
	}
	return nil, fmt.Errorf("issue certificate %s: the stored record keeps changing: %w", cn, ErrConflict)
}

// newServiceRecord issues sa's certificate and key for asked (less
// jitter; 0: the current default) and records asked, the lifetime its
// rotations keep.
func (m *Manager) newServiceRecord(sa mesh.ServiceAccount, asked time.Duration) (serviceRecord, error) {
	lifetime := asked
	if lifetime == 0 {
		lifetime, _ = m.Lifetimes()
	}
	cn := m.ServiceCommonName(sa)
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return serviceRecord{}, fmt.Errorf("generate key for %s: %w", cn, err)
	}
	spiffe, err := url.Parse(sa.SPIFFEID(m.opts.TrustDomain))
	if err != nil {
		return serviceRecord{}, fmt.Errorf("SPIFFE ID of %s: %w", sa, err)
	}
	now := m.now()
	cert, certPEM, err := m.ca.sign(&x509.Certificate{
		Subject:     pkix.Name{CommonName: string(cn), Organization: []string{"osm-vm"}},
		NotBefore:   now.Add(-time.Minute),
		NotAfter:    now.Add(jitter(lifetime)),
		KeyUsage:    x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
		URIs:        []*url.URL{spiffe},
	}, &key.PublicKey)
	if err != nil {
		return serviceRecord{}, err
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		return serviceRecord{}, fmt.Errorf("encode key for %s: %w", cn, err)
	}
	return serviceRecord{
		CommonName:     cn,
		ServiceAccount: sa,
		CertPEM:        string(certPEM),
		KeyPEM:         string(pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})),
		Serial:         serialString(cert.SerialNumber),
		Issued:         now,
		Expires:        cert.NotAfter,
		Lifetime:       asked,
	}, nil
}

func (m *Manager) serviceCertificate(rec serviceRecord) (*Certificate, error) {
	leaf, err := parseCertPEM([]byte(rec.CertPEM))
	if err != nil {
		return nil, fmt.Errorf("stored certificate %s: %w", rec.CommonName, err)
	}
	return newCertificate(leaf, []byte(rec.CertPEM), []byte(rec.KeyPEM), m.ca.certPEM), nil
}

// syncServices reloads every service certificate from the store and, when
// announce is set, announces what changed since this replica last looked:
// Issued, Rotated or Released. Store versions only grow and syncs are
// serialised by syncMu, so each one sees at least what the previous saw.
func (m *Manager) syncServices(ctx context.Context, announce bool) error {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	// Every issue and rotation wakes this: list versions only, and read
	// and decode the records this replica has not seen at their version
	// (the first proxies of 1,000 services decoded a million records).
	kvs, err := m.st.ListVersions(ctx, servicePrefix)
	if err != nil {
		return fmt.Errorf("list service certificates: %w", err)
	}
	m.mu.Lock()
	known := maps.Clone(m.services)
	m.mu.Unlock()
	byKey := make(map[string]*serviceState, len(known))
	for _, s := range known {
		byKey[serviceKey(s.rec.ServiceAccount)] = s
	}

	next := make(map[CommonName]*serviceState, len(kvs))
	var events []Announcement
	var changed []string
	for _, kv := range kvs {
		if old := byKey[kv.Key]; old != nil && old.version >= kv.Version {
			next[old.rec.CommonName] = old
			continue
		}
		changed = append(changed, kv.Key)
	}
	read, err := readKeys(ctx, m.st, servicePrefix, changed, len(kvs))
	if err != nil {
		return fmt.Errorf("read service certificates: %w", err)
	}
	for _, kv := range read {
		if kv.Version == 0 {
			continue // deleted since the listing
		}
		s, ev := m.serviceChange(kv, func(cn CommonName) *serviceState { return known[cn] })
		if s == nil {
			continue
		}
		next[s.rec.CommonName] = s
		events = append(events, ev...)
	}
	for cn, old := range known {
		if next[cn] == nil {
			events = append(events, Announcement{Kind: Released, CommonName: cn, ServiceAccount: old.rec.ServiceAccount})
		}
	}
	m.mu.Lock()
	m.services = next
	m.nextRotationKnown = false
	if announce {
		for _, a := range events {
			m.announceLocked(a)
		}
	}
	m.mu.Unlock()
	m.wake()
	return nil
}

// observeService reloads one service certificate after a local write and
// announces its change, without listing the others. A deletion is left to
// the next syncServices. It returns what it read (nil if nothing).
func (m *Manager) observeService(ctx context.Context, key string) *serviceState {
	m.syncMu.Lock()
	defer m.syncMu.Unlock()
	raw, ver, err := m.st.Get(ctx, key)
	if err != nil || ver == 0 {
		m.followStore() // Run's listing catches up
		return nil
	}
	// serviceChange reads only this record's entry: copying every
	// service's made the first issues of a fresh server quadratic in
	// services (maps.Clone was 1.9% of the fleet fill's CPU at 1,000).
	s, events := m.serviceChange(store.KV{Key: key, Value: raw, Version: ver}, func(cn CommonName) *serviceState {
		m.mu.Lock()
		defer m.mu.Unlock()
		return m.services[cn]
	})
	if s == nil {
		m.followStore()
		return nil
	}
	m.mu.Lock()
	if old := m.services[s.rec.CommonName]; old == nil || old.version < s.version {
		m.serviceSetLocked(s)
		for _, a := range events {
			m.announceLocked(a)
		}
	}
	m.mu.Unlock()
	m.wake()
	return s
}

// serviceChange decodes a stored service certificate and compares it with
// what this replica knew. It returns nil for a record that does not decode.
func (m *Manager) serviceChange(kv store.KV, known func(CommonName) *serviceState) (*serviceState, []Announcement) {
	var rec serviceRecord
	if err := json.Unmarshal(kv.Value, &rec); err != nil {
		m.log.Warn("skipping undecodable service certificate", "key", kv.Key, "err", err)
		return nil, nil
	}
	old := known(rec.CommonName)
	if old != nil && old.version >= kv.Version {
		return old, nil
	}
	c, err := m.serviceCertificate(rec)
	if err != nil {
		m.log.Warn("skipping unparsable service certificate", "key", kv.Key, "err", err)
		return nil, nil
	}
	s := &serviceState{version: kv.Version, rec: rec, cert: c}
	switch {
	case old == nil:
		return s, []Announcement{{Kind: Issued, CommonName: rec.CommonName, ServiceAccount: rec.ServiceAccount}}
	case old.rec.Serial != rec.Serial:
		return s, []Announcement{{Kind: Rotated, CommonName: rec.CommonName, ServiceAccount: rec.ServiceAccount}}
	}
	return s, nil
}

// rotateDue rotates every service certificate due for rotation. Another
// replica rotating the same one first is not an error.
func (m *Manager) rotateDue(ctx context.Context) error {
	now := m.now()
	m.mu.Lock()
	var due []mesh.ServiceAccount
	for _, s := range m.services {
		if !now.Before(s.rec.rotateAt()) {
			due = append(due, s.rec.ServiceAccount)
		}
	}
	m.mu.Unlock()
	var errs []error
	for _, sa := range due {
		if _, err := m.issueService(ctx, sa, 0, false); err != nil && !errors.Is(err, ErrConflict) {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}
