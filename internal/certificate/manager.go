// Package certificate owns the mesh certificate authority and every
// certificate osm-server issues (the seed's certificate.Manager):
//
//   - the root: ECDSA P-256, self-signed for the trust domain (default
//     osm.local), created on first start and kept in the store at
//     certificate/ca, so restarts and every server replica share it. Two
//     replicas racing to create it both end up with the first one written.
//   - service certificates, for proxy-to-proxy mTLS: one per service
//     account, common name <sa>.<namespace>.<trust-domain> and URI SAN
//     spiffe://<trust-domain>/ns/<namespace>/sa/<sa>, living the service
//     lifetime (24h unless the MeshConfig or SetLifetimes says otherwise)
//     with up to 10% random jitter subtracted. The certificate and its key are kept at
//     certificate/service/<namespace>/<sa> so all proxies of the account and
//     all replicas share them. Run rotates each one when less than a third
//     of its lifetime is left (ServiceCertificate also does when asked for
//     one that is due) and issues those RequestServiceCertificate asked for
//     without waiting; every replica running Run announces an issue or a
//     rotation, whoever made it.
//   - proxy certificates, for a proxy's xDS client mTLS only: common name
//     <proxy-uuid>.<service>.<namespace> and URI SAN
//     spiffe://<trust-domain>/ns/<namespace>/sa/<sa>/proxy/<proxy-uuid>,
//     client-auth only, 7 days by default. They are issued only from a
//     CSR, so the key never leaves the machine; the server chooses the
//     subject and SANs and ignores what the CSR asks for. A record per proxy
//     (certificate/proxy/<cn>) keeps its state (unclaimed, claimed, revoked)
//     and the serials it may present: the current certificate and at most
//     one overlap certificate (the one it renewed with), so a record does
//     not grow with renewals. A proxy renews at most once per hour (or
//     tenth of its certificate lifetime, if shorter): an earlier renewal
//     is refused with a *TooEarlyError saying when it is allowed. A connecting proxy is checked against
//     its record at once, while the record of its connection (the claim)
//     is written by Run in the background, many claims per transaction.
//     Run deletes a record once every certificate it vouches for expired
//     more than ProxyRecordRetention (7 days) ago (prune.go).
//   - serving certificates for the HTTPS API and the xDS server
//     (ServingCertificate), held in memory by each replica.
//
// Multi-key changes are single store transactions with version checks; a
// lost race is reloaded, or reported as ErrConflict where the caller must
// decide. Private keys of the CA and of service certificates are stored in
// the store unencrypted (the bbolt file is 0600).
//
// Not done yet: root rotation (the root lives 10 years) and encrypting keys
// at rest.
//
// Announcements (Subscribe) are buffered per subscriber and never block
// the manager; a subscriber that falls far behind gets one Resync instead
// of the backlog.
//
// The package imports internal/mesh, internal/meshapi (for the CA hash
// agents pin, CAHash) and internal/store (for the KV and Op vocabulary)
// only; it must not import catalog, spec, xds, enroll, api or anything that
// serves a protocol.
package certificate

import (
	"context"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"regexp"
	"sync"
	"sync/atomic"
	"time"

	"github.com/osm-vm/osm-vm/internal/keylock"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// Store keys.
const (
	caKey         = "certificate/ca"
	servicePrefix = "certificate/service/"
	proxyPrefix   = "certificate/proxy/"
)

// Defaults for Options.
const (
	DefaultTrustDomain     = "osm.local"
	DefaultServiceLifetime = 24 * time.Hour
	DefaultProxyLifetime   = 7 * 24 * time.Hour
	// DefaultProxyRecordRetention is how long a proxy record is kept
	// after every certificate it vouches for expired.
	DefaultProxyRecordRetention = 7 * 24 * time.Hour
)

// subscriberBuffer is how many announcements a subscriber may fall behind
// before its backlog is replaced by one Resync.
const subscriberBuffer = 1024

// Sentinel errors, wrapped with context.
var (
	// ErrNotFound: no such certificate or proxy.
	ErrNotFound = errors.New("not found")
	// ErrRevoked: the proxy is revoked, or presented a certificate that is
	// no longer one of its own.
	ErrRevoked = errors.New("revoked")
	// ErrConflict: a version condition of the transaction failed; reload
	// and retry.
	ErrConflict = errors.New("conflict")
	// ErrExpired: the presented certificate has expired.
	ErrExpired = errors.New("expired")
	// ErrInvalidCSR: the CSR does not parse, its signature does not verify
	// or its key is too weak.
	ErrInvalidCSR = errors.New("invalid certificate signing request")
	// ErrPending: the service certificate asked for of
	// RequestServiceCertificate is being issued by Run, which announces it
	// (Issued or Rotated) when it is.
	ErrPending = errors.New("pending")
)

// Store is what the manager needs from internal/store.
type Store interface {
	Get(ctx context.Context, key string) ([]byte, uint64, error)
	List(ctx context.Context, prefix string) ([]store.KV, error)
	ListVersions(ctx context.Context, prefix string) ([]store.KV, error)
	Txn(ctx context.Context, ops ...store.Op) (bool, error)
	Watch(ctx context.Context, prefix string) <-chan struct{}
}

// ownWrites is the manager's view of its store: its commits and its
// watches carry the manager's store.Writer, so that a store whose commits
// all pass through this process (bbolt, the memory store) does not wake
// Run to list every record after commits the manager read back as it made
// them (observeProxy, observeService, forgetProxies, syncServices after a
// release). Other writers' commits still wake it, and Consul wakes it for
// every commit. A read-back that fails asks Run to list (followStore).
// At 10,000 proxies that listing, after every batch of claims while a
// fleet connected, was 3-4% of a fresh server's CPU.
type ownWrites struct {
	Store
	w *store.Writer
}

func (o ownWrites) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	return o.Store.Txn(store.WithWriter(ctx, o.w), ops...)
}

// TxnLimits forwards the limits of the store (see [store.TxnLimits]).
func (o ownWrites) TxnLimits() (ops, bytes int) { return store.TxnLimits(o.Store) }

func (o ownWrites) Watch(ctx context.Context, prefix string) <-chan struct{} {
	return o.Store.Watch(store.WithWriter(ctx, o.w), prefix)
}

// Options configure a Manager. Zero values take the defaults.
type Options struct {
	// TrustDomain names the mesh in SPIFFE IDs; default "osm.local". It
	// must match the trust domain of a CA already in the store.
	TrustDomain string
	// ServiceLifetime of service certificates; default 24h (as MeshConfig). Each one is
	// issued with up to 10% of it subtracted at random, so rotations of
	// many certificates spread out.
	ServiceLifetime time.Duration
	// ProxyLifetime of proxy certificates; default 7 days.
	ProxyLifetime time.Duration
	// ProxyRecordRetention is how long a proxy's record is kept after its
	// current certificate and every earlier one still in its renewal
	// overlap expired, revoked or not; Run then deletes it (at start and
	// about hourly). Default 7 days; negative is refused.
	ProxyRecordRetention time.Duration
	// ClaimGather is how long Run's claim writer waits for proxies'
	// claims to stop coming before writing them in one transaction;
	// default DefaultClaimGather, negative: none (each wake writes what
	// is pending at once).
	ClaimGather time.Duration
	// ClaimMaxWait bounds the wait while claims keep coming: the writer
	// writes what is pending this long after the first claim it
	// gathers; default DefaultClaimMaxWait, negative: no wait.
	ClaimMaxWait time.Duration
	// Now is the clock (tests); default time.Now.
	Now func() time.Time
	// Duty runs what must run on one replica at a time (proxy-record
	// pruning); nil runs it on this one (a single server is always the
	// holder).
	Duty Duty
	// Lifetimes, when set, is followed while Run runs: its lifetimes
	// apply to the certificates issued from each change on (a MeshConfig
	// change; see SetLifetimes). nil: the lifetimes change only by
	// SetLifetimes.
	Lifetimes LifetimeSource
}

// Duty is held by one replica at a time. Run calls fn whenever this
// replica holds it, with a ctx that ends the moment it stops holding it,
// until ctx ends.
type Duty interface {
	Run(ctx context.Context, fn func(ctx context.Context) error) error
}

// alwaysHeld is the Duty of a server that shares its store with no one.
type alwaysHeld struct{}

func (alwaysHeld) Run(ctx context.Context, fn func(ctx context.Context) error) error { return fn(ctx) }

// AnnouncementKind says what changed.
type AnnouncementKind int

// The kinds of Announcement.
const (
	// Issued: a service certificate was issued for an account that had
	// none.
	Issued AnnouncementKind = iota + 1
	// Rotated: a service certificate was replaced by a new one.
	Rotated
	// Released: a service certificate was released (deleted).
	Released
	// ProxyIssued: a proxy was enrolled and its first certificate issued.
	ProxyIssued
	// ProxyRenewed: a proxy's certificate was renewed.
	ProxyRenewed
	// ProxyClaimed: a proxy connected for the first time.
	ProxyClaimed
	// ProxyRevoked: a proxy was revoked; close its streams.
	ProxyRevoked
	// Resync: the subscriber fell more than 1024 announcements behind and
	// some were dropped; reload everything it depends on.
	Resync
)

func (k AnnouncementKind) String() string {
	switch k {
	case Issued:
		return "Issued"
	case Rotated:
		return "Rotated"
	case Released:
		return "Released"
	case ProxyIssued:
		return "ProxyIssued"
	case ProxyRenewed:
		return "ProxyRenewed"
	case ProxyClaimed:
		return "ProxyClaimed"
	case ProxyRevoked:
		return "ProxyRevoked"
	case Resync:
		return "Resync"
	}
	return fmt.Sprintf("AnnouncementKind(%d)", int(k))
}

// Announcement tells subscribers that a certificate or proxy changed.
// Service kinds set CommonName and ServiceAccount; proxy kinds set ProxyCN
// and ServiceAccount.
type Announcement struct {
	Kind           AnnouncementKind
	CommonName     CommonName
	ServiceAccount mesh.ServiceAccount
	ProxyCN        string
}

// Manager is the mesh CA and certificate manager. Its methods are safe for
// concurrent use.
type Manager struct {
	log  *slog.Logger
	st   Store
	opts Options
	// serviceLife and proxyLife are the lifetimes of certificates issued
	// from now on (SetLifetimes); opts holds those New was given.
	serviceLife, proxyLife atomic.Int64
	ca                     *authority
	root                   *Certificate

	// issueMu serialises this replica's service-certificate writes, so
	// concurrent callers for one account wait for one issuance.
	issueMu sync.Mutex
	// syncMu serialises syncServices (a List and its diff).
	syncMu sync.Mutex
	// renewals serialises this replica's renewals of each proxy.
	renewals keylock.Set
	// verified remembers the proxy certificates known to chain to the root
	// (see VerifyClient).
	verified verifiedCerts

	mu       sync.Mutex
	services map[CommonName]*serviceState
	// nextRotation caches the earliest rotateAt of services (when
	// nextRotationKnown), so that Run's loop, which asks at every wake-up
	// (each certificate requested or claim written), does not scan every
	// service: at 1,000 services that scan was 1.2% of a fleet fill's CPU.
	nextRotation      time.Time
	nextRotationKnown bool
	proxies           map[string]proxyKnown
	// undecodable holds the version of each proxy record (by key) that did
	// not decode, so syncProxies reports it once and skips it until it
	// changes.
	undecodable map[string]uint64
	// proxiesListed is set once syncProxies has listed the records: the
	// first listing, at the start, reads them all.
	proxiesListed bool
	subs          map[chan Announcement]struct{}
	// requested holds the service accounts whose certificates
	// RequestServiceCertificate asked Run to issue, and issuers counts the
	// Runs serving them (with none, RequestServiceCertificate issues
	// itself).
	requested map[mesh.ServiceAccount]struct{}
	issuers   int
	// kick wakes Run to recompute its rotation timer and issue what was
	// requested.
	kick chan struct{}
	// metrics are nil unless Instrument was called (metrics.go).
	metrics *metrics
	// pruneKick wakes the prune loop to look at the clock again (tests).
	pruneKick chan struct{}

	// claimMu guards the claims not yet written (claims.go): the time of
	// each proxy's connection and its record as read then, by CN, and how
	// many claim writers (Runs) are running (with none, ClaimProxy
	// writes itself), and when the last claim came (the gather's clock).
	claimMu      sync.Mutex
	claims       map[string]pendingClaim
	claimWriters int
	lastClaim    time.Time
	// claimKick wakes the claim writer.
	claimKick chan struct{}
	// claimBatch is the most claims one transaction writes (what the
	// store takes in one).
	claimBatch int
	// follow asks Run to list the records as after another writer's
	// commit: reading back one of this manager's own commits failed.
	follow chan struct{}
	// after is time.After (tests record the delays Run asks for).
	after func(time.Duration) <-chan time.Time
	// stopwatch times the syncs that pace the next (syncPace): time.Now,
	// whose monotonic reading a step of the wall clock does not move, and
	// not Options.Now, which tests move by hours.
	stopwatch func() time.Time
}

var trustDomainRE = regexp.MustCompile(`^[a-z0-9]([a-z0-9._-]*[a-z0-9])?$`)

// New loads the mesh CA from the store, creating it if the store has none,
// and loads the current service certificates and proxy records. Run keeps
// them rotated and announced.
func New(ctx context.Context, log *slog.Logger, st Store, opts Options) (*Manager, error) {
	if opts.TrustDomain == "" {
		opts.TrustDomain = DefaultTrustDomain
	}
	if len(opts.TrustDomain) > 255 || !trustDomainRE.MatchString(opts.TrustDomain) {
		return nil, fmt.Errorf("trust domain %q: use lower-case letters, digits, '.', '-' and '_' (for example %q)", opts.TrustDomain, DefaultTrustDomain)
	}
	if opts.ServiceLifetime == 0 {
		opts.ServiceLifetime = DefaultServiceLifetime
	}
	if opts.ProxyLifetime == 0 {
		opts.ProxyLifetime = DefaultProxyLifetime
	}
	if opts.ServiceLifetime < time.Second || opts.ProxyLifetime < time.Second {
		return nil, fmt.Errorf("certificate lifetimes must be at least 1s (service %s, proxy %s)", opts.ServiceLifetime, opts.ProxyLifetime)
	}
	if opts.ProxyRecordRetention == 0 {
		opts.ProxyRecordRetention = DefaultProxyRecordRetention
	}
	if opts.ProxyRecordRetention < 0 {
		return nil, fmt.Errorf("proxy record retention %s is negative: give a duration such as %s", opts.ProxyRecordRetention, DefaultProxyRecordRetention)
	}
	if opts.ClaimGather == 0 {
		opts.ClaimGather = DefaultClaimGather
	}
	if opts.ClaimMaxWait == 0 {
		opts.ClaimMaxWait = DefaultClaimMaxWait
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	m := &Manager{
		log:         log,
		st:          ownWrites{Store: st, w: new(store.Writer)},
		opts:        opts,
		services:    map[CommonName]*serviceState{},
		proxies:     map[string]proxyKnown{},
		undecodable: map[string]uint64{},
		subs:        map[chan Announcement]struct{}{},
		requested:   map[mesh.ServiceAccount]struct{}{},
		kick:        make(chan struct{}, 1),
		pruneKick:   make(chan struct{}, 1),

		claims:    map[string]pendingClaim{},
		claimKick: make(chan struct{}, 1),
		follow:    make(chan struct{}, 1),
		after:     time.After,
		stopwatch: time.Now,
	}
	m.claimBatch, _ = store.TxnLimits(m.st)
	m.serviceLife.Store(int64(opts.ServiceLifetime))
	m.proxyLife.Store(int64(opts.ProxyLifetime))
	ca, err := m.loadOrCreateCA(ctx)
	if err != nil {
		return nil, err
	}
	m.ca = ca
	m.root = newCertificate(ca.cert, ca.certPEM, nil, ca.certPEM)
	if err := m.syncServices(ctx, false); err != nil {
		return nil, err
	}
	if err := m.syncProxies(ctx, false); err != nil {
		return nil, err
	}
	return m, nil
}

// loadOrCreateCA returns the stored CA, creating it with a must-not-exist
// write; when another replica wins that race, its CA is loaded.
func (m *Manager) loadOrCreateCA(ctx context.Context) (*authority, error) {
	for range 3 {
		raw, ver, err := m.st.Get(ctx, caKey)
		if err != nil {
			return nil, fmt.Errorf("load mesh CA from store key %s: %w", caKey, err)
		}
		if ver != 0 {
			var rec caRecord
			if err := json.Unmarshal(raw, &rec); err != nil {
				return nil, fmt.Errorf("mesh CA at store key %s does not decode (restore the store from a backup): %w", caKey, err)
			}
			if rec.TrustDomain != m.opts.TrustDomain {
				return nil, fmt.Errorf("the store holds the mesh CA of trust domain %q, not %q: start with trust domain %q, or use a new store for a new mesh", rec.TrustDomain, m.opts.TrustDomain, rec.TrustDomain)
			}
			a, err := loadAuthority(rec)
			if err != nil {
				return nil, fmt.Errorf("mesh CA at store key %s (restore the store from a backup): %w", caKey, err)
			}
			return a, nil
		}
		rec, err := newCARecord(m.opts.TrustDomain, m.now())
		if err != nil {
			return nil, err
		}
		val, err := json.Marshal(rec)
		if err != nil {
			return nil, fmt.Errorf("encode mesh CA: %w", err)
		}
		ok, err := m.st.Txn(ctx, store.Set(caKey, 0, val))
		if err != nil {
			return nil, fmt.Errorf("store mesh CA at %s: %w", caKey, err)
		}
		if ok {
			m.log.Info("created mesh CA", "trustDomain", m.opts.TrustDomain)
		}
		// Either ours or another replica's is stored now: load it.
	}
	return nil, fmt.Errorf("mesh CA at store key %s: created and deleted concurrently: %w", caKey, ErrConflict)
}

func (m *Manager) now() time.Time { return m.opts.Now() }

// SetLifetimes sets the lifetimes of the certificates issued from now on,
// as a MeshConfig change asks: proxy certificates at their next issue or
// renewal, and service certificates issued with the default lifetime at
// their next rotation. Certificates already issued keep their dates. Zero
// leaves a lifetime as it is; one under a second is refused.
func (m *Manager) SetLifetimes(service, proxy time.Duration) error {
	if (service != 0 && service < time.Second) || (proxy != 0 && proxy < time.Second) {
		return fmt.Errorf("certificate lifetimes must be at least 1s (service %s, proxy %s)", service, proxy)
	}
	if service != 0 {
		m.serviceLife.Store(int64(service))
	}
	if proxy != 0 {
		m.proxyLife.Store(int64(proxy))
	}
	return nil
}

// Lifetimes returns the lifetimes of service and proxy certificates issued
// from now on.
func (m *Manager) Lifetimes() (service, proxy time.Duration) {
	return time.Duration(m.serviceLife.Load()), time.Duration(m.proxyLife.Load())
}

// TrustDomain returns the mesh's trust domain.
func (m *Manager) TrustDomain() string { return m.opts.TrustDomain }

// RootPEM returns the mesh root as PEM: the manager's own bytes (as
// x509.Certificate.Raw is), which the caller must not modify. The
// publisher asks it for each service account's secrets; a copy each time
// was 4% of what a full generation allocated.
func (m *Manager) RootPEM() []byte { return m.ca.certPEM }

// CertPool returns a pool holding the mesh root, for verifying peers.
func (m *Manager) CertPool() *x509.CertPool { return m.ca.pool.Clone() }

// CAHash returns CAHash of the mesh root.
func (m *Manager) CAHash() string { return CAHash(m.ca.cert.Raw) }

// Subscribe returns a channel of announcements and a function that ends the
// subscription and closes the channel. The manager never waits for a
// subscriber: one that falls more than 1024 announcements behind has its
// backlog replaced by a single Resync.
func (m *Manager) Subscribe() (<-chan Announcement, func()) {
	ch := make(chan Announcement, subscriberBuffer)
	m.mu.Lock()
	m.subs[ch] = struct{}{}
	m.mu.Unlock()
	var once sync.Once
	return ch, func() {
		once.Do(func() {
			m.mu.Lock()
			delete(m.subs, ch)
			close(ch)
			m.mu.Unlock()
		})
	}
}

// announceLocked sends a to every subscriber; m.mu is held, so only this
// goroutine sends and a full buffer can be emptied without blocking.
func (m *Manager) announceLocked(a Announcement) {
	m.log.Debug("announce", "kind", a.Kind, "cn", a.CommonName, "proxy", a.ProxyCN)
	for ch := range m.subs {
		select {
		case ch <- a:
			continue
		default:
		}
	drain:
		for {
			select {
			case <-ch:
			default:
				break drain
			}
		}
		for _, x := range []Announcement{{Kind: Resync}, a} {
			select {
			case ch <- x:
			default:
			}
		}
	}
}

// wake asks Run to recompute its timers.
func (m *Manager) wake() {
	for _, ch := range []chan struct{}{m.kick, m.pruneKick} {
		select {
		case ch <- struct{}{}:
		default:
		}
	}
}

// followStore asks Run to list the service and proxy records soon, as
// after another writer's commit: reading back one of this manager's own
// commits failed (see ownWrites).
func (m *Manager) followStore() {
	select {
	case m.follow <- struct{}{}:
	default:
	}
}

// syncDelay is how long Run lets commits of service certificates or proxy
// records accumulate before it reads them, at the least.
const syncDelay = 200 * time.Millisecond

// syncPace scales a sync's cost into the least delay before the next: after
// a sync of the proxy records (or of the service certificates) that took
// d, Run reads them again no sooner than syncPace*d after the next commit,
// so that following other writers
// takes at most about a fifth of its time however large the fleet. On
// Consul, where a listing moves every record's value (ListVersions), a
// listing of 10,000 proxy records took 0.15-0.30 s on a quiet 2-core VM
// and 0.45-0.70 s on a busy one: with syncDelay alone a fleet's commits
// kept each replica (and Consul) listing them half the time or more.
const syncPace = 4

// syncDelayAfter is the delay before a sync whose previous one took cost.
func syncDelayAfter(cost time.Duration) time.Duration {
	return max(syncDelay, syncPace*cost)
}

// Run rotates service certificates before they expire, issues those
// RequestServiceCertificate asked for, follows changes other replicas
// make in the store, announcing them, follows Options.Lifetimes, writes
// proxy claims (ClaimProxy) in the background and deletes proxy records past their
// retention (at start and then about hourly). It returns nil when ctx is done,
// once the pending claims are written. Store errors are logged and retried
// with backoff: a rotation loop that gives up takes the mesh down when the
// certificates expire.
func (m *Manager) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	defer wg.Wait()
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.mu.Lock()
	m.issuers++ // from now on RequestServiceCertificate leaves issuing to run
	m.mu.Unlock()
	defer func() {
		m.mu.Lock()
		m.issuers--
		m.mu.Unlock()
	}()
	m.claimMu.Lock()
	m.claimWriters++ // from now on ClaimProxy leaves the write to writeClaims
	m.claimMu.Unlock()
	wg.Go(func() { m.writeClaims(ctx) })
	if m.opts.Lifetimes != nil {
		wg.Go(func() { m.followLifetimes(ctx, m.opts.Lifetimes) })
	}
	wg.Go(func() {
		duty := m.opts.Duty
		if duty == nil {
			duty = alwaysHeld{}
		}
		_ = duty.Run(ctx, m.pruneLoop)
	})
	return m.run(ctx)
}

func (m *Manager) run(ctx context.Context) error {
	svcCh := m.st.Watch(ctx, servicePrefix)
	proxyCh := m.st.Watch(ctx, proxyPrefix)
	const minBackoff, maxBackoff = 500 * time.Millisecond, time.Minute
	var (
		backoff time.Duration
		retryAt time.Time // when failing: the next attempt
	)
	fail := func(what string, err error) {
		backoff = min(max(2*backoff, minBackoff), maxBackoff)
		retryAt = m.now().Add(backoff)
		m.log.Error(what, "err", err, "retryIn", backoff)
	}
	// What each kind of sync last took paces the next (syncPace).
	var svcCost, proxyCost time.Duration
	timed := func(cost *time.Duration, sync func(context.Context, bool) error) error {
		start := m.stopwatch()
		err := sync(ctx, true)
		*cost = m.stopwatch().Sub(start)
		return err
	}
	syncServices := func() error { return timed(&svcCost, m.syncServices) }
	syncProxies := func() error { return timed(&proxyCost, m.syncProxies) }
	// Catch up with commits made between New and the watches.
	if err := syncServices(); err != nil {
		fail("load service certificates", err)
	}
	if err := syncProxies(); err != nil {
		fail("load proxy records", err)
	}
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	var svcSync, proxySync <-chan time.Time
	for {
		wait := m.untilNextRotation()
		if !retryAt.IsZero() {
			// Something failed: retry the syncs, rotations and prune then.
			wait = max(retryAt.Sub(m.now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-m.kick:
			if err := m.issueRequested(ctx); err != nil && ctx.Err() == nil {
				fail("issue requested service certificates", err)
			}
		case <-svcCh:
			// Local changes are observed as they are made; this follows
			// other writers. Waiting a moment turns the first proxies of
			// many services (each issuing a certificate) into one pass.
			if svcSync == nil {
				svcSync = m.after(syncDelayAfter(svcCost))
			}
		case <-svcSync:
			svcSync = nil
			if err := syncServices(); err != nil && ctx.Err() == nil {
				fail("follow service certificates", err)
			}
		case <-proxyCh:
			// Likewise: a fleet connecting is one pass over the records.
			if proxySync == nil {
				proxySync = m.after(syncDelayAfter(proxyCost))
			}
		case <-m.follow:
			if svcSync == nil {
				svcSync = m.after(syncDelayAfter(svcCost))
			}
			if proxySync == nil {
				proxySync = m.after(syncDelayAfter(proxyCost))
			}
		case <-proxySync:
			proxySync = nil
			if err := syncProxies(); err != nil && ctx.Err() == nil {
				fail("follow proxy records", err)
			}
		case <-timer.C:
			err := errors.Join(syncServices(), syncProxies(), m.rotateDue(ctx), m.issueRequested(ctx))
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				fail("rotate service certificates", err)
			default:
				backoff, retryAt = 0, time.Time{}
			}
		}
	}
}

// untilNextRotation returns how long until the earliest service
// certificate is due for rotation (an hour when there are none).
func (m *Manager) untilNextRotation() time.Duration {
	m.mu.Lock()
	defer m.mu.Unlock()
	if !m.nextRotationKnown {
		m.nextRotation = time.Time{}
		for _, s := range m.services {
			if at := s.rec.rotateAt(); m.nextRotation.IsZero() || at.Before(m.nextRotation) {
				m.nextRotation = at
			}
		}
		m.nextRotationKnown = true
	}
	wait := time.Hour
	if !m.nextRotation.IsZero() {
		wait = min(wait, m.nextRotation.Sub(m.now()))
	}
	return max(wait, 0)
}

// serviceSetLocked records s in m.services (m.mu held), keeping
// nextRotation: a new service can only bring it forward; a replaced one
// (rotated) may have been the earliest, so it is found again.
func (m *Manager) serviceSetLocked(s *serviceState) {
	old := m.services[s.rec.CommonName]
	m.services[s.rec.CommonName] = s
	switch at := s.rec.rotateAt(); {
	case old != nil:
		m.nextRotationKnown = false
	case m.nextRotationKnown && (m.nextRotation.IsZero() || at.Before(m.nextRotation)):
		m.nextRotation = at
	}
}

// jitter subtracts up to 10% of d at random.
func jitter(d time.Duration) time.Duration {
	return d - rand.N(d/10+1)
}
