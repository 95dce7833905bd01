package certificate

import (
	"context"
	"math/rand/v2"
	"sync"
	"time"
)

// keyLocks serialises work on one key within this process (renewing one
// proxy), while work on other keys runs in parallel. It is an
// optimisation, not the correctness mechanism: the store's version checks
// are, so replicas sharing a store stay correct; with the lock, the
// renewals of one proxy in this process neither fail each other's checks
// nor sign certificates only to throw them away. (internal/enroll has
// the same small type for join tokens; neither package imports the other.)
type keyLocks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sem     chan struct{}
	waiters int // holders and waiters, guarded by keyLocks.mu
}

// lock takes key's lock, or returns ctx's error if ctx ends first. The
// returned func releases it.
func (k *keyLocks) lock(ctx context.Context, key string) (func(), error) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l := k.locks[key]
	if l == nil {
		l = &keyLock{sem: make(chan struct{}, 1)}
		k.locks[key] = l
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

// backoff waits a jittered, exponentially growing time before retry
// attempt (1 is the first retry): between half and all of 2ms·2^(attempt-1),
// at most 100ms, so replicas that collided spread out. It returns false
// if ctx ends first.
func backoff(ctx context.Context, attempt int) bool {
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
