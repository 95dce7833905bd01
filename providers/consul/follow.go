package main

import (
	"context"
	"math/rand/v2"
	"time"

	"github.com/hashicorp/consul/api"
)

// pacing is how a blocking-query loop treats Consul.
type pacing struct {
	// wait is each blocking query's wait time (Consul adds up to
	// wait/16 of jitter).
	wait time.Duration
	// minInterval separates the starts of two queries of one loop, so a
	// flapping service wakes its loop at most 1/minInterval times a second
	// (the changes in between coalesce: a blocking query returns the
	// newest state).
	minInterval time.Duration
	// After a failed query the next waits backoffMin, doubling to
	// backoffMax, with up to 25% jitter so many loops do not retry in step.
	backoffMin, backoffMax time.Duration
}

var defaultPacing = pacing{
	wait:        defaultWaitTime,
	minInterval: 100 * time.Millisecond,
	backoffMin:  250 * time.Millisecond,
	backoffMax:  30 * time.Second,
}

func (p pacing) backoff(failures int) time.Duration {
	d := p.backoffMin
	for i := 1; i < failures && d < p.backoffMax; i++ {
		d *= 2
	}
	d = min(d, p.backoffMax)
	return d + time.Duration(rand.Int64N(int64(d)/4+1))
}

// step is what the loop does after one query: the index of the next query
// and whether to apply the answer.
type step struct {
	next  uint64
	apply bool
	reset bool // the index went backwards (Consul restarted empty, or a snapshot restore)
}

// nextIndex applies Consul's rules for blocking queries
// (developer.hashicorp.com/consul/api-docs/features/blocking): an index
// that went backwards resets to 0, so the next query is a plain read; an
// index of 0 (never valid in an answer) becomes 1, so the next query
// blocks instead of spinning; an unchanged index means nothing changed
// (the wait ended) and the answer is not applied.
func nextIndex(prev, got uint64) step {
	switch {
	case got < prev:
		return step{next: 0, apply: true, reset: true}
	case got == prev && prev != 0:
		return step{next: prev}
	case got == 0:
		return step{next: 1, apply: true}
	}
	return step{next: got, apply: true}
}

// follow runs blocking queries until ctx is done: fetch asks Consul with
// the options it is given, apply receives each answer that brought a new
// index, and report is told the outcome of every query (nil on success).
// After a failure the index is forgotten, so the next successful query is
// a plain read of the current state (after a restart Consul's index starts
// again from the beginning, and a query with the old index would block
// until its wait ends).
func follow[T any](ctx context.Context, p pacing, fetch func(*api.QueryOptions) (T, *api.QueryMeta, error), apply func(T), report func(error), onReset func()) {
	var index uint64
	failures := 0
	for ctx.Err() == nil {
		start := time.Now()
		q := (&api.QueryOptions{WaitIndex: index, WaitTime: p.wait}).WithContext(ctx)
		v, meta, err := fetch(q)
		if ctx.Err() != nil {
			return
		}
		pause := max(0, p.minInterval-time.Since(start))
		if err != nil {
			failures++
			index = 0
			report(err)
			pause = p.backoff(failures)
		} else {
			failures = 0
			report(nil)
			s := nextIndex(index, meta.LastIndex)
			if s.reset && onReset != nil {
				onReset()
			}
			if s.apply {
				apply(v)
			}
			index = s.next
		}
		if !sleep(ctx, pause) {
			return
		}
	}
}

// sleep waits d or until ctx is done; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
