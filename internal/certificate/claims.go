package certificate

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/store"
)

// A proxy's claim (unclaimed -> claimed, LastSeen) is checked when the
// proxy connects and written after: the revocation check reads the record
// from the store before ClaimProxy returns, but the write, an fsync'd
// transaction, is not on the connecting proxy's path while Run runs. Run's
// claim writer commits every claim pending at the time as one transaction,
// so a fleet connecting at once costs a few commits instead of one each.
// Until it is written, a claim is visible to this replica's readers (Proxy,
// ListProxies, VerifyProxy); Run writes what is pending before it returns.
// Without Run (or after it), ClaimProxy writes before it returns.

// Bounds of the claim writer. The most claims one transaction writes is
// what the store takes in one (store.TxnLimits: 64 on Consul, 1,024 on
// bbolt, where every commit is an fsync); a batch whose records add up to
// more than its bytes is written claim by claim.
const (
	// DefaultClaimGather is how long the claim writer waits for claims
	// to stop coming before it writes them (Options.ClaimGather): proxies
	// joining one after another (machines booting, a rollout) then share
	// a commit instead of costing one fsync'd transaction each, and the
	// commit comes after the joins instead of among them. A commit's CPU
	// grows with its claims (on bbolt each claim rewrites a page of
	// records: about 25 µs of a 2-core VM's CPU), and the joins beside it
	// pay for it: with commits every 100 ms during a run of joins, 2-4%
	// of them overlapped one and M5's p99 was set by them
	// (issue 26's twenty-sixth round in the history of docs/performance.md).
	DefaultClaimGather = 100 * time.Millisecond
	// DefaultClaimMaxWait bounds how long a claim waits while claims keep
	// coming (Options.ClaimMaxWait). A batch of what the store takes in
	// one transaction is written at once. Until written, a claim is
	// visible to this replica; other replicas see it up to this much
	// later. A crash meanwhile loses it, and the proxy, whose stream the
	// crash closed, claims again when it reconnects.
	DefaultClaimMaxWait = 5 * time.Second
	// claimAttempts is how often a batch is re-read and retried when a
	// record changed under it, before its claims are written one by one.
	claimAttempts = 3
	// claimFlushTimeout bounds the last write when Run returns.
	claimFlushTimeout = 10 * time.Second
)

// claim is the change a connection at time at makes to a record: an
// unclaimed one becomes claimed, last seen at; a claimed one is left as it
// is (a reconnect writes nothing, so a fleet reconnecting to another
// replica costs the store nothing; LastSeen moves at renewals, which
// write the record anyway); a revoked record is refused. It changes e
// only when it returns nil.
func claim(e *proxyEntry, at time.Time) error {
	if e.State == StateRevoked {
		return fmt.Errorf("proxy %s: %w (enroll the machine again with a new join token)", e.CN, ErrRevoked)
	}
	if e.State == StateClaimed {
		return errUnchanged
	}
	e.State = StateClaimed
	e.LastSeen = at
	return nil
}

// pendingClaim is a claim not written yet: when the proxy connected, and
// its record as read then, before the claim (Version 0: not known).
type pendingClaim struct {
	at  time.Time
	rec ProxyRecord
}

// claimWrite is a claim a batch wrote: the record and its encoding, to
// read it back without decoding it (val nil: read back already).
type claimWrite struct {
	cn  string
	e   proxyEntry
	val []byte
}

// claimAt is claim at a fixed time, as updateProxy's change.
func claimAt(at time.Time) func(*proxyEntry, time.Time) error {
	return func(e *proxyEntry, _ time.Time) error { return claim(e, at) }
}

// ClaimProxy records that the proxy cn connected: unclaimed becomes
// claimed (announced once as ProxyClaimed when written) and LastSeen is
// updated (at most once a minute for a claimed proxy). A revoked or unknown
// proxy is refused, from the store's record, before it returns. While Run
// runs, the write happens in the background (see the top of claims.go).
func (m *Manager) ClaimProxy(ctx context.Context, cn string) error {
	e, _, err := m.loadProxy(ctx, cn)
	if err != nil {
		return fmt.Errorf("claim proxy: %w", err)
	}
	return m.claimLoaded(ctx, e)
}

// ClaimVerifiedProxy is ClaimProxy for the record VerifyProxyChain returned
// when the proxy's stream opened, without reading it from the store again
// (a connection's second read and decode of its record). A revocation
// since then is not missed: it closes the proxy's streams, and the claim
// is written on condition that the record is still at rec.Version (read
// again and claimed anew when it is not), so it never overwrites a
// revocation.
func (m *Manager) ClaimVerifiedProxy(ctx context.Context, rec ProxyRecord) error {
	return m.claimLoaded(ctx, proxyEntry{ProxyRecord: rec})
}

// claimLoaded claims the proxy of the record e, as ClaimProxy.
func (m *Manager) claimLoaded(ctx context.Context, e proxyEntry) error {
	cn := e.CN
	now := m.now()
	read := e.ProxyRecord
	m.claimMu.Lock()
	m.applyPendingClaimLocked(&e)
	switch err := claim(&e, now); {
	case errors.Is(err, errUnchanged):
		m.claimMu.Unlock()
		return nil
	case err != nil:
		m.claimMu.Unlock()
		return fmt.Errorf("claim proxy: %w", err)
	}
	if m.claimWriters == 0 {
		m.claimMu.Unlock()
		return m.updateProxy(ctx, cn, "claim", claim)
	}
	m.claims[cn] = pendingClaim{at: now, rec: read}
	m.lastClaim = time.Now() // the gather's clock, not Options.Now
	// The writer is woken by the first claim it will gather and by a
	// transaction's worth, not by each claim (a wake-up per join).
	// Claims that come while it writes are written after, as it finds
	// them pending.
	wake := len(m.claims) == 1 || len(m.claims) >= m.claimBatch
	m.claimMu.Unlock()
	if wake {
		m.kickClaims()
	}
	return nil
}

// kickClaims wakes the claim writer.
func (m *Manager) kickClaims() {
	select {
	case m.claimKick <- struct{}{}:
	default:
	}
}

// applyPendingClaimLocked changes e as this replica's pending claim of it
// will when written. m.claimMu is held.
func (m *Manager) applyPendingClaimLocked(e *proxyEntry) {
	pc, ok := m.claims[e.CN]
	if !ok {
		return
	}
	_ = claim(e, pc.at) // a claim that no longer applies changes nothing
}

// withPendingClaim returns r as it will be once this replica's pending
// claim of it is written.
func (m *Manager) withPendingClaim(r ProxyRecord) ProxyRecord {
	m.claimMu.Lock()
	defer m.claimMu.Unlock()
	e := proxyEntry{ProxyRecord: r}
	m.applyPendingClaimLocked(&e)
	return e.ProxyRecord
}

// writeClaims is Run's claim writer (Run has counted it in
// m.claimWriters): it writes pending claims as they come, including any an
// earlier Run left, retries failed writes with backoff, and when ctx is
// done writes what is pending and returns. From then on ClaimProxy writes
// itself.
func (m *Manager) writeClaims(ctx context.Context) {
	m.kickClaims() // claims an earlier Run left, if any
	const minBackoff, maxBackoff = 500 * time.Millisecond, time.Minute
	var backoff time.Duration
	var retry <-chan time.Time
	for {
		woken := m.claimKick
		if retry != nil {
			woken = nil // failing: new claims wait for the retry
		}
		select {
		case <-ctx.Done():
			m.finishClaims(ctx)
			return
		case <-woken:
			if m.gatherClaims(ctx); ctx.Err() != nil {
				continue // finishClaims writes them
			}
		case <-retry:
		}
		retry = nil
		if err := m.flushAllClaims(ctx); err != nil {
			if ctx.Err() != nil {
				continue // finishClaims writes them
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			retry = time.After(backoff)
			cns := m.pendingClaims()
			m.log.Error("record proxy claims (kept in memory, retrying)", "err", err, "retryIn", backoff,
				"pending", len(cns), "proxies", proxyNames(cns, 10))
			continue
		}
		backoff = 0
	}
}

// gatherClaims waits until no claim has come for Options.ClaimGather,
// Options.ClaimMaxWait has passed, a transaction's worth is pending, or
// ctx is done. A claim does not wake it (a wake-up per join): when its
// timer fires it looks at when the last claim came and waits on.
func (m *Manager) gatherClaims(ctx context.Context) {
	if m.opts.ClaimGather <= 0 {
		return
	}
	start := time.Now()
	var t *time.Timer
	for {
		m.claimMu.Lock()
		full, last := len(m.claims) >= m.claimBatch, m.lastClaim
		m.claimMu.Unlock()
		wait := claimWait(start, last, time.Now(), m.opts.ClaimGather, m.opts.ClaimMaxWait)
		if full || wait <= 0 {
			return
		}
		if t == nil {
			t = time.NewTimer(wait)
			defer t.Stop()
		} else {
			t.Reset(wait)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-m.claimKick: // a transaction's worth
		}
	}
}

// claimWait is how much longer a claim writer woken at start waits at now,
// the last claim having come at last: until claims have stopped for quiet,
// and at most until maxWait after start.
func claimWait(start, last, now time.Time, quiet, maxWait time.Duration) time.Duration {
	until := last.Add(quiet)
	if limit := start.Add(maxWait); limit.Before(until) {
		until = limit
	}
	return until.Sub(now)
}

// finishClaims hands claiming back to ClaimProxy and writes what is
// pending, within claimFlushTimeout.
func (m *Manager) finishClaims(ctx context.Context) {
	m.claimMu.Lock()
	m.claimWriters--
	m.claimMu.Unlock()
	fctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), claimFlushTimeout)
	defer cancel()
	if err := m.flushAllClaims(fctx); err != nil {
		cns := m.pendingClaims()
		m.log.Error("proxy claims not recorded at shutdown (they are recorded at the proxies' next connection)",
			"err", err, "pending", len(cns), "proxies", proxyNames(cns, len(cns)))
	}
}

// flushAllClaims writes pending claims until none are left.
func (m *Manager) flushAllClaims(ctx context.Context) error {
	for {
		left, err := m.flushClaims(ctx)
		if err != nil || left == 0 {
			return err
		}
	}
}

// flushClaims writes as many pending claims as the store takes in one transaction
// and returns how many are left pending.
func (m *Manager) flushClaims(ctx context.Context) (left int, err error) {
	m.claimMu.Lock()
	batch := make(map[string]pendingClaim, min(len(m.claims), m.claimBatch))
	for cn, pc := range m.claims {
		if len(batch) == m.claimBatch {
			break
		}
		batch[cn] = pc
	}
	m.claimMu.Unlock()
	if len(batch) == 0 {
		return 0, nil
	}
	start := time.Now()
	written, err := m.writeClaimBatch(ctx, batch)
	if err != nil {
		return 0, err // all kept pending
	}
	// A commit costs what the records' pages do (an fsync'd bbolt commit
	// of 20 claims writes some 180 KB), and joins that overlap it are
	// slower: at debug level its end and length line up with joins
	// (osm-bench --joins-out).
	m.log.Debug("proxy claims written", "claims", len(written), "batch", len(batch), "took", time.Since(start))
	// Written or no longer needed: forget the claims, unless a newer one
	// for the proxy came meanwhile.
	m.claimMu.Lock()
	for cn, pc := range batch {
		if cur, ok := m.claims[cn]; ok && cur.at.Equal(pc.at) {
			delete(m.claims, cn)
		}
	}
	left = len(m.claims)
	m.claimMu.Unlock()
	for _, w := range written {
		if w.val != nil {
			m.observeWritten(ctx, w.cn, &w.e, w.val)
		}
	}
	return left, nil
}

// writeClaimBatch writes batch's claims as one transaction and returns
// the records it changed. The first attempt claims each record as it was
// read when its proxy connected, on condition that it is still at that
// version; later attempts read the records again. Claims of revoked or
// unknown proxies, claims already recorded and claims whose record no
// longer decodes (the proxy is refused at its next connection) are
// dropped. When records keep changing under the batch, each claim is
// written on its own. An error (the store failing) means the whole batch
// stays pending.
func (m *Manager) writeClaimBatch(ctx context.Context, batch map[string]pendingClaim) (written []claimWrite, err error) {
	for attempt := range claimAttempts {
		var ops []store.Op
		written = written[:0]
		for cn, pc := range batch {
			e, ver := proxyEntry{ProxyRecord: pc.rec}, pc.rec.Version
			if attempt > 0 || ver == 0 {
				e, ver, err = m.loadProxy(ctx, cn)
				if m.claimDropped(cn, err) {
					continue
				}
				if err != nil {
					return nil, err
				}
			}
			if claim(&e, pc.at) != nil {
				continue // revoked meanwhile, or already recorded
			}
			val, err := encodeProxy(e)
			if err != nil {
				return nil, fmt.Errorf("encode proxy record %s: %w", cn, err)
			}
			ops = append(ops, store.Set(proxyKey(cn), ver, val))
			written = append(written, claimWrite{cn: cn, e: e, val: val})
		}
		if len(ops) == 0 {
			return nil, nil
		}
		if maxOps, maxBytes := store.TxnLimits(m.st); store.CheckLimitsOf(ops, maxOps, maxBytes) != nil {
			break // records too large to go together: one by one
		}
		ok, err := m.st.Txn(ctx, ops...)
		if err != nil {
			return nil, fmt.Errorf("write the claims of %d proxies: %w", len(ops), err)
		}
		if ok {
			return written, nil
		}
	}
	// Some record keeps changing (renewals, another replica): one by one,
	// so the others are not held back by it.
	written = written[:0]
	for cn, pc := range batch {
		err := m.updateProxy(ctx, cn, "claim", claimAt(pc.at))
		switch {
		case err == nil:
			written = append(written, claimWrite{cn: cn}) // updateProxy read it back
		case errors.Is(err, ErrRevoked), m.claimDropped(cn, err):
		default:
			return nil, err
		}
	}
	return written, nil
}

// claimDropped reports whether err, from reading cn's record, means its
// claim is not to be written at all: the record is gone, or no longer
// decodes (logged).
func (m *Manager) claimDropped(cn string, err error) bool {
	switch {
	case errors.Is(err, ErrNotFound):
		m.log.Debug("claim of a proxy whose record is gone dropped", "cn", cn)
		return true
	case errors.Is(err, errUndecodable):
		m.log.Warn("claim of a proxy whose record does not decode dropped; the proxy is refused when it next connects", "cn", cn, "err", err)
		return true
	}
	return false
}

// pendingClaims returns the CNs of the claims not yet written, sorted.
func (m *Manager) pendingClaims() []string {
	m.claimMu.Lock()
	defer m.claimMu.Unlock()
	return slices.Sorted(maps.Keys(m.claims))
}

// proxyNames lists up to n of cns for a log line.
func proxyNames(cns []string, n int) string {
	if len(cns) <= n {
		return strings.Join(cns, ",")
	}
	return fmt.Sprintf("%s and %d more", strings.Join(cns[:n], ","), len(cns)-n)
}
