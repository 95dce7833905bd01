package certificate

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/store"
)

// A proxy record is useless once every certificate it vouches for has
// expired: the proxy can neither connect (VerifyProxy refuses an expired
// certificate, as does the TLS handshake) nor renew (RenewProxy needs an
// unexpired certificate of the record) and must enroll again with a join
// token, which makes a record with a new CN. Run deletes such records
// ProxyRecordRetention after the last expiry, so `proxy list` still shows
// recent ones, and the store, m.proxies and every syncProxies pass do not
// grow with every machine ever enrolled (a scale set replacing machines
// daily).
//
// Deleting announces nothing. A stream opened before its certificate
// expired is not closed by the expiry (TLS checks it at the handshake, the
// xDS server at the stream's start and on Resync), so one could in
// principle outlive the retention; but whether its record exists changes
// nothing for it (a recheck refuses it as expired either way). And a pass
// deleting a large fleet's records would overflow subscribers' buffers
// into a Resync, on which the xDS publisher treats every service account
// as rotated and the xDS server verifies every stream again.

// proxyPruneEvery is how often Run deletes proxy records past their
// retention.
const proxyPruneEvery = time.Hour

// pruneBatch is the most records one delete transaction removes: what
// every store takes in one transaction (as the join tokens' Prune in
// internal/enroll).
const pruneBatch = store.MaxTxnOps

// pruneProxies deletes the proxy records whose every certificate expired
// ProxyRecordRetention or more ago, revoked or not, and forgets them on
// this replica; others forget them at their next syncProxies. It judges
// from what this replica last saw of each record (m.proxies) and deletes
// on the condition that the record is still at the version seen, so a
// record renewed meanwhile stays; a batch with such a record is retried
// one record at a time. It returns how many it deleted.
func (m *Manager) pruneProxies(ctx context.Context) (int, error) {
	cutoff := m.now().Add(-m.opts.ProxyRecordRetention).Unix()
	var ops []store.Op
	m.mu.Lock()
	for cn, k := range m.proxies {
		if k.lastExpiry <= cutoff {
			ops = append(ops, store.Delete(proxyKey(cn), k.version))
		}
	}
	m.mu.Unlock()
	slices.SortFunc(ops, func(a, b store.Op) int { return strings.Compare(a.Key, b.Key) })
	var deleted []string
	defer func() { m.forgetProxies(deleted) }()
	for chunk := range slices.Chunk(ops, pruneBatch) {
		ok, err := m.st.Txn(ctx, chunk...)
		if err != nil {
			return len(deleted), fmt.Errorf("prune proxy records: %w", err)
		}
		if ok {
			for _, op := range chunk {
				deleted = append(deleted, strings.TrimPrefix(op.Key, proxyPrefix))
			}
			continue
		}
		for _, op := range chunk {
			ok, err := m.st.Txn(ctx, op)
			if err != nil {
				return len(deleted), fmt.Errorf("prune proxy records: %w", err)
			}
			if ok {
				deleted = append(deleted, strings.TrimPrefix(op.Key, proxyPrefix))
			}
		}
	}
	return len(deleted), nil
}

// pruneLoop deletes proxy records past their retention at once and then
// every proxyPruneEvery, until ctx ends (this replica stops holding the
// duty, or shuts down). A failure is logged and retried with backoff.
func (m *Manager) pruneLoop(ctx context.Context) error {
	const minBackoff, maxBackoff = 500 * time.Millisecond, time.Minute
	var (
		backoff   time.Duration
		nextPrune time.Time // zero: at once
	)
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		failing := backoff > 0
		if failing || !m.now().Before(nextPrune) {
			n, err := m.pruneProxies(ctx)
			if n > 0 {
				m.log.Info("deleted proxy records whose certificates all expired", "deleted", n, "retention", m.opts.ProxyRecordRetention)
			}
			switch {
			case ctx.Err() != nil:
				return nil
			case err != nil:
				backoff = min(max(2*backoff, minBackoff), maxBackoff)
				m.log.Error("prune proxy records", "err", err, "retryIn", backoff)
			default:
				backoff, nextPrune = 0, m.now().Add(proxyPruneEvery)
			}
		}
		wait := backoff
		if wait == 0 {
			wait = max(nextPrune.Sub(m.now()), 0)
		}
		timer.Reset(wait)
		select {
		case <-ctx.Done():
			return nil
		case <-m.pruneKick:
		case <-timer.C:
		}
	}
}

// forgetProxies drops what this replica keeps about the proxies cns,
// whose records are gone from the store: what it last saw of them and
// their pending claims (which would be dropped when written anyway).
func (m *Manager) forgetProxies(cns []string) {
	if len(cns) == 0 {
		return
	}
	m.mu.Lock()
	for _, cn := range cns {
		delete(m.proxies, cn)
	}
	m.mu.Unlock()
	m.claimMu.Lock()
	for _, cn := range cns {
		delete(m.claims, cn)
	}
	m.claimMu.Unlock()
	m.log.Debug("forgot deleted proxy records", "count", len(cns), "proxies", proxyNames(cns, 10))
}
