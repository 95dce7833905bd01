package consulstore

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"time"

	"github.com/hashicorp/consul/api"
)

// pacing bounds how often a watch queries Consul.
type pacing struct {
	// minInterval separates the starts of two queries: a busy prefix
	// wakes a watch at most 1/minInterval times a second, its commits
	// coalescing in between.
	minInterval time.Duration
	// After an error, an index gone backwards or a query back early with
	// nothing new, the next waits backoffMin, doubling to backoffMax,
	// until a query brings a new index.
	backoffMin, backoffMax time.Duration
	// firstWithin bounds Watch's own first query.
	firstWithin time.Duration
	// sleep waits d or until ctx ends (tests record instead).
	sleep func(ctx context.Context, d time.Duration) error
}

var defaultPacing = pacing{
	minInterval: 100 * time.Millisecond,
	backoffMin:  250 * time.Millisecond,
	backoffMax:  5 * time.Second,
	firstWithin: 10 * time.Second,
	sleep:       sleepCtx,
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

func (p pacing) backoff(n int) time.Duration {
	d := p.backoffMin
	for i := 1; i < n && d < p.backoffMax; i++ {
		d *= 2
	}
	return min(d, p.backoffMax)
}

func (p pacing) spacing(elapsed time.Duration) time.Duration {
	return max(0, p.minInterval-elapsed)
}

// watch is one Watch's blocking-query loop.
type watch struct {
	s      *Store
	prefix string // the full Consul prefix
	ch     chan struct{}
	log    *slog.Logger
	pace   pacing

	index     uint64 // the X-Consul-Index to wait on; 0 after a reset
	empty     bool   // no key under the prefix at index
	pending   bool   // a signal is owed once a query succeeds
	anomalies int    // consecutive errors, resets and early returns
	failing   bool   // the last query failed (for logging the recovery)
}

// result is what one query brought.
type result struct {
	index   uint64
	empty   bool
	elapsed time.Duration
	err     error
}

func (w *watch) query(ctx context.Context) result {
	start := time.Now()
	q := (&api.QueryOptions{WaitIndex: w.index, WaitTime: waitTime}).WithContext(ctx)
	stem, sep := listing(w.prefix)
	keys, meta, err := w.s.kv.Keys(stem, sep, q)
	r := result{elapsed: time.Since(start), err: err}
	if err == nil {
		r.index, r.empty = meta.LastIndex, !slices.ContainsFunc(keys, func(k string) bool { return strings.HasPrefix(k, w.prefix) })
	}
	return r
}

// listing is the key listing a watch of prefix blocks on. A listing of
// the prefix itself would move every key under it after each commit:
// about 0.7 MB for 10,000 proxy records, each time. Consul's index for a
// listing covers every key under the listed prefix whatever the
// separator, and a separator folds the keys into what precedes it. So a
// prefix ending in "/" is listed as the prefix without that "/", with "/"
// as the separator: every key under it folds into the prefix itself, one
// key of answer. Keys beginning with the stem but not the prefix
// ("osm/spec2" beside "osm/spec/") come back as keys of their own and can
// move the index: a signal with nothing new under the prefix, which
// Watch allows, and none while the prefix is empty (see step). A prefix
// without a trailing "/" is listed as it is.
func listing(prefix string) (stem, separator string) {
	if s, ok := strings.CutSuffix(prefix, "/"); ok && s != "" {
		return s, "/"
	}
	return prefix, ""
}

// first takes the baseline index before Watch returns. When Consul cannot
// be asked, the watch signals once it can: the caller may have missed
// anything meanwhile.
func (w *watch) first(ctx context.Context) {
	qctx, cancel := context.WithTimeout(ctx, w.pace.firstWithin)
	defer cancel()
	r := w.query(qctx)
	if r.err != nil {
		w.pending = true
		w.step(r)
		return
	}
	w.index, w.empty = max(r.index, 1), r.empty
}

func (w *watch) run(ctx context.Context) {
	var delay time.Duration
	if w.anomalies > 0 {
		delay = w.pace.backoff(w.anomalies)
	}
	for {
		resync := w.s.resyncs()
		qctx, cancel := untilClosed(ctx, resync)
		var r result
		err := error(nil)
		if delay > 0 {
			err = w.pace.sleep(qctx, delay)
		}
		if err == nil {
			r = w.query(qctx)
		}
		cancel()
		if ctx.Err() != nil {
			return
		}
		if isClosed(resync) {
			// Resync: whatever this query or backoff was, start again
			// from 0 now, and signal after that query.
			w.log.Debug("consul store: watch resyncing")
			w.index, w.pending, w.anomalies, delay = 0, true, 0, 0
			continue
		}
		var signal bool
		signal, delay = w.step(r)
		if signal {
			select {
			case w.ch <- struct{}{}:
			default: // one is pending: coalesced
			}
		}
	}
}

// untilClosed is ctx, also cancelled when done is closed.
func untilClosed(ctx context.Context, done <-chan struct{}) (context.Context, context.CancelFunc) {
	cctx, cancel := context.WithCancel(ctx)
	go func() {
		select {
		case <-done:
			cancel()
		case <-cctx.Done():
		}
	}()
	return cctx, cancel
}

func isClosed(ch <-chan struct{}) bool {
	select {
	case <-ch:
		return true
	default:
		return false
	}
}

// step applies Consul's blocking-query rules to a query's result and says
// whether to signal and how long to wait before the next query.
//
// Consul's index for a prefix is the highest ModifyIndex of its keys and
// tombstones, but for a prefix with neither it is the whole KV table's
// index, which moves with every write anywhere: so a new index signals
// unless the prefix was empty before and still is.
func (w *watch) step(r result) (signal bool, delay time.Duration) {
	if r.err != nil {
		// The agent may have restarted empty, or another answered: its
		// index may be below ours, and a blocking query waits until it
		// passes ours (or times out), blind meanwhile. Start again from 0
		// and signal then.
		w.index, w.pending = 0, true
		w.anomalies++
		delay = w.pace.backoff(w.anomalies)
		w.log.Warn("consul store: watch query failed; retrying", "err", w.s.errorf(r.err, "watch %s", w.prefix), "retry_in", delay)
		w.failing = true
		return false, delay
	}
	if w.failing {
		w.log.Info("consul store: watch query works again")
		w.failing = false
	}
	// An index is at least 1: waiting on 0 returns at once.
	idx := max(r.index, 1)
	switch {
	case w.index == 0: // the first query after a reset
		w.index, w.empty = idx, r.empty
		signal, w.pending = w.pending, false
		return signal, w.pace.spacing(r.elapsed)
	case idx < w.index:
		// Backwards: Consul's state was restored or rebuilt, or tombstones
		// were reaped. Start again from 0 and signal after that query.
		w.log.Info("consul store: watch index went backwards; resetting", "from", w.index, "to", idx)
		w.index, w.pending = 0, true
		w.anomalies++
		return false, w.pace.backoff(w.anomalies)
	case idx == w.index:
		if r.elapsed < waitTime/2 {
			w.anomalies++ // back early with nothing new: don't loop on it
			return false, w.pace.backoff(w.anomalies)
		}
		return false, w.pace.spacing(r.elapsed)
	default:
		signal = w.pending || !(w.empty && r.empty)
		w.index, w.empty, w.pending, w.anomalies = idx, r.empty, false, 0
		return signal, w.pace.spacing(r.elapsed)
	}
}
