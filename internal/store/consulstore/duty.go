package consulstore

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/hashicorp/consul/api"
)

// Duty is work that must run on one replica at a time (pruning), held
// under a Consul lock: a session with a TTL that this replica renews, and
// the lock key KeyPrefix+"duty/"+name acquired with it. Several replicas
// call Run with the same name; one runs its function at a time.
type Duty struct {
	s    *Store
	name string
	key  string
	// ttl is the session's TTL: another replica takes the duty over at
	// most ttl plus Consul's lock delay after this one dies.
	ttl time.Duration
	// lockDelay is the session's lock delay: after a session is lost the
	// lock cannot be taken for that long.
	lockDelay time.Duration
}

// Duty returns the duty name (a key segment such as "prune").
func (s *Store) Duty(name string) *Duty {
	return &Duty{s: s, name: name, key: s.prefix + "duty/" + name, ttl: 10 * time.Second, lockDelay: time.Second}
}

// Run calls fn whenever this replica holds the duty, with a ctx that ends
// the moment it may no longer hold it: the session could not be renewed
// within half its TTL (Consul unreachable: it may expire without this
// replica hearing of it), the session was destroyed, or the lock key was
// taken or deleted. It then tries to take the duty again. Run returns nil
// when ctx ends, releasing the lock and destroying the session; errors are
// logged and retried with backoff, never returned.
func (d *Duty) Run(ctx context.Context, fn func(ctx context.Context) error) error {
	log := d.s.log.With("duty", d.name)
	var backoff time.Duration
	for ctx.Err() == nil {
		held, err := d.hold(ctx, log, fn)
		if ctx.Err() != nil {
			return nil
		}
		if held {
			backoff = 0
		}
		if err != nil {
			backoff = min(max(2*backoff, d.s.pace.backoffMin), d.ttl)
			log.Warn("singleton duty: lost or not taken; trying again", "err", err, "retry_in", backoff)
			if d.s.pace.sleep(ctx, backoff) != nil {
				return nil
			}
		}
	}
	return nil
}

// hold takes the lock once and runs fn while it is held.
func (d *Duty) hold(ctx context.Context, log *slog.Logger, fn func(ctx context.Context) error) (held bool, err error) {
	host, _ := os.Hostname()
	sessions := d.s.client.Session()
	id, _, err := sessions.CreateNoChecks(&api.SessionEntry{
		Name:      fmt.Sprintf("osm-server %s pid %d: %s", host, os.Getpid(), d.name),
		TTL:       d.ttl.String(),
		LockDelay: d.lockDelay,
		Behavior:  api.SessionBehaviorRelease,
	}, (&api.WriteOptions{}).WithContext(ctx))
	if err != nil {
		return false, d.s.errorf(err, "create a session for duty %s", d.name)
	}
	// The session is ours to end, whatever happens below.
	defer func() {
		dctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), d.ttl/2)
		defer cancel()
		_, _ = sessions.Destroy(id, (&api.WriteOptions{}).WithContext(dctx))
	}()
	hctx, lost := context.WithCancelCause(ctx)
	defer lost(nil)
	renewed := make(chan struct{})
	go func() {
		defer close(renewed)
		d.renew(hctx, lost, id)
	}()
	defer func() { <-renewed }()

	lock, err := d.s.client.LockOpts(&api.LockOptions{Key: d.key, Session: id, LockWaitTime: d.ttl, Value: []byte(id)})
	if err != nil {
		return false, fmt.Errorf("consul store at %s: lock %s: %w", d.s.addr, d.key, err)
	}
	stop := make(chan struct{})
	go func() { <-hctx.Done(); close(stop) }()
	lostCh, err := lock.Lock(stop)
	if err != nil {
		return false, d.s.errorf(err, "take lock %s", d.key)
	}
	if lostCh == nil { // stopped: ctx ended or the session was lost
		return false, context.Cause(hctx)
	}
	go func() {
		select {
		case <-lostCh:
			lost(fmt.Errorf("lock %s no longer held by this replica's session", d.key))
		case <-hctx.Done():
		}
	}()
	log.Info("singleton duty taken: this replica runs it", "lock", d.key)
	ferr := fn(hctx)
	cause := context.Cause(hctx)
	lost(nil)
	_ = lock.Unlock()
	if ctx.Err() != nil {
		return true, nil
	}
	log.Warn("singleton duty given up", "lock", d.key, "because", cause, "err", ferr)
	return true, errors.Join(cause, ferr)
}

// renew renews session id every third of its TTL until ctx ends, and ends
// the hold (lost) once a renewal has not succeeded for half the TTL.
func (d *Duty) renew(ctx context.Context, lost context.CancelCauseFunc, id string) {
	sessions := d.s.client.Session()
	lastOK := time.Now()
	for {
		if d.s.pace.sleep(ctx, d.ttl/3) != nil {
			return
		}
		rctx, cancel := context.WithTimeout(ctx, d.ttl/2-time.Since(lastOK))
		entry, _, err := sessions.Renew(id, (&api.WriteOptions{}).WithContext(rctx))
		cancel()
		switch {
		case ctx.Err() != nil:
			return
		case err == nil && entry == nil:
			lost(fmt.Errorf("session %s for duty %s was destroyed", id, d.name))
			return
		case err == nil:
			lastOK = time.Now()
		case time.Since(lastOK) >= d.ttl/2:
			lost(d.s.errorf(err, "renew session %s for duty %s within half its TTL", id, d.name))
			return
		}
	}
}
