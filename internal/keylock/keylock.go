// Package keylock serialises work on one key within a process (renewing
// one proxy, spending one join token) while work on other keys runs in
// parallel, and spaces out the retries of a store write that lost a
// version check.
//
// It is an optimisation, not the correctness mechanism: the store's
// version checks are, so replicas sharing a store stay correct; the lock
// keeps the callers of one process from failing each other's checks.
//
// keylock imports nothing of ours.
package keylock

import (
	"context"
	"errors"
	"math/rand/v2"
	"sync"
	"time"
)

// Set holds a lock per key; the zero value is ready to use.
type Set struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sem     chan struct{}
	waiters int // holders and waiters, guarded by Set.mu
}

// ErrBusy is returned by Lock when too many callers already hold or wait
// for the key's lock.
var ErrBusy = errors.New("busy")

// Lock takes key's lock, or returns ctx's error if ctx ends first. The
// returned func releases it. When maxWaiters is above 0 and that many
// callers already hold or wait for the lock, it returns ErrBusy at once.
func (k *Set) Lock(ctx context.Context, key string, maxWaiters int) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{sem: make(chan struct{}, 1)}
		k.locks[key] = l
	}
	if maxWaiters > 0 && l.waiters >= maxWaiters {
		k.mu.Unlock()
		return nil, ErrBusy
	}
	l.waiters++
	k.mu.Unlock()
	release := func() {
		k.mu.Lock()
		l.waiters--
		if l.waiters == 0 {
			delete(k.locks, key)
		}
		k.mu.Unlock()
	}
	select {
	case l.sem <- struct{}{}:
		return func() { <-l.sem; release() }, nil
	case <-ctx.Done():
		release()
		return nil, ctx.Err()
	}
}

// Backoff waits a jittered, exponentially growing time before retry
// attempt (1 is the first retry): between half and all of 2ms·2^(attempt-1),
// at most 100ms, so replicas that collided spread out. It returns false
// if ctx ends first.
func Backoff(ctx context.Context, attempt int) bool {
	const base, ceiling = 2 * time.Millisecond, 100 * time.Millisecond
	d := ceiling
	if attempt < 8 {
		d = min(base<<(attempt-1), ceiling)
	}
	d = d/2 + rand.N(d/2+1)
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
