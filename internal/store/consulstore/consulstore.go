// Package consulstore keeps osm-server's store in Consul KV, so several
// osm-servers share one state. It meets the store.Store contract exactly
// as bbolt does (the storetest suite runs against a real Consul):
//
//   - a key K lives at Consul key KeyPrefix+K; its version is its
//     ModifyIndex (Consul's Raft index: increasing, shared by all keys);
//   - CompareAndSwap and Txn go through /v1/txn, with cas, delete-cas,
//     check-index and check-not-exists ops, so a condition that fails is
//     ok=false; a transaction over store.MaxTxnOps ops or Consul's 512 KiB
//     request body (values travel base64-encoded) is refused before it is
//     sent, wrapping store.ErrTooLarge;
//   - Watch runs a blocking query on the prefix's keys, with Consul's
//     index rules: an index that goes backwards or comes back 0 resets,
//     queries are rate-limited and back off on errors, never looping hot.
//
// Reads use Consul's default consistency (served by the leader).
// The package imports internal/store only, of osm-vm.
package consulstore

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/internal/store"
)

// Store is a store.Store in Consul KV. Close it to stop its watches.
type Store struct {
	client *api.Client
	kv     *api.KV
	txn    *api.Txn
	prefix string
	addr   string // the agent's URL, for errors
	limits Config
	log    *slog.Logger
	pace   pacing

	// commits and conflicts count transactions Consul committed and
	// refused on a version condition: the write load this replica puts on
	// Consul's Raft log (see Stats).
	commits, conflicts atomic.Uint64

	// transport is the HTTP client's connection pool (Resync empties it).
	transport interface{ CloseIdleConnections() }

	mu      sync.Mutex
	closed  bool
	watches map[*int]context.CancelFunc
	wg      sync.WaitGroup
	// resync is closed (and replaced) by Resync: every watch drops its
	// query or backoff and starts again from index 0.
	resync chan struct{}
}

var _ store.Store = (*Store)(nil)

// Open connects to Consul as cfg says and checks that the token may read
// cfg.KeyPrefix. It does not retry: an unreachable Consul is an error
// naming the address and how to set it.
func Open(ctx context.Context, cfg Config, log *slog.Logger) (*Store, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.withDefaults()
	ac := cfg.apiConfig()
	addr := url(ac)
	if ac.TokenFile != "" {
		b, err := os.ReadFile(ac.TokenFile)
		if err != nil {
			return nil, fmt.Errorf("consul store at %s: ACL token file: %w", addr, err)
		}
		ac.Token, ac.TokenFile = strings.TrimSpace(string(b)), ""
	}
	client, err := api.NewClient(ac)
	if err != nil {
		return nil, fmt.Errorf("consul store at %s: %w (check the Consul address, scheme and TLS files)", addr, err)
	}
	s := &Store{
		client:  client,
		kv:      client.KV(),
		txn:     client.Txn(),
		prefix:  cfg.KeyPrefix,
		addr:    addr,
		limits:  cfg,
		log:     log.With("store", "consul", "consul", addr, "prefix", cfg.KeyPrefix),
		pace:    defaultPacing,
		watches: map[*int]context.CancelFunc{},
		resync:  make(chan struct{}),
	}
	if ac.Transport != nil {
		s.transport = ac.Transport
	}
	// A key read, not /v1/status/leader: it checks the token and its
	// read permission on the prefix (a list would filter, not refuse).
	if _, _, err := s.kv.Get(s.prefix, (&api.QueryOptions{}).WithContext(ctx)); err != nil {
		return nil, s.errorf(err, "read %s", s.prefix)
	}
	return s, nil
}

// Stats counts what this Store did to Consul since Open.
type Stats struct {
	// Commits are transactions Consul committed: each one Raft write.
	Commits uint64
	// Conflicts are transactions refused on a version condition (another
	// writer first): no write.
	Conflicts uint64
}

// Stats returns the counts so far.
func (s *Store) Stats() Stats {
	return Stats{Commits: s.commits.Load(), Conflicts: s.conflicts.Load()}
}

// Addr is the Consul agent's URL, for messages.
func (s *Store) Addr() string { return s.addr }

// Resync makes every watch ask Consul afresh, now, from index 0, and
// signal once that query is answered; it also drops idle pooled
// connections. Call it when Consul is reachable again after an outage
// (osm-server's store probe does). Without it a watch catches up late for
// two reasons: a blocking query sent before the outage sits on a TCP
// connection whose peer's answer was lost (the kernel resends it only on
// its retransmission timer, which doubles while the link is down, up to
// minutes; or the query waits out its 5 minutes), and a watch whose
// queries failed meanwhile is in its error backoff.
func (s *Store) Resync() {
	s.mu.Lock()
	close(s.resync)
	s.resync = make(chan struct{})
	s.mu.Unlock()
	if s.transport != nil {
		s.transport.CloseIdleConnections()
	}
}

// resyncs returns the channel the next Resync closes.
func (s *Store) resyncs() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.resync
}

// Close stops every watch and waits for their goroutines.
func (s *Store) Close() error {
	s.mu.Lock()
	s.closed = true
	for _, cancel := range s.watches {
		cancel()
	}
	s.mu.Unlock()
	s.wg.Wait()
	return nil
}

// errorf wraps a failed Consul call, naming the agent and the fix.
func (s *Store) errorf(err error, format string, args ...any) error {
	what := fmt.Sprintf(format, args...)
	if errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) {
		return fmt.Errorf("consul store at %s: %s: %w", s.addr, what, err)
	}
	return fmt.Errorf("consul store at %s: %s: %w (%s)", s.addr, what, err, s.hint(err))
}

func (s *Store) hint(err error) string {
	msg := err.Error()
	var se api.StatusError
	switch {
	case errors.As(err, &se) && se.Code == 403,
		strings.Contains(msg, "Permission denied"), strings.Contains(msg, "ACL not found"):
		return fmt.Sprintf("the ACL token (consul token, CONSUL_HTTP_TOKEN) needs key_prefix %q read and write", s.prefix)
	case strings.Contains(msg, "connection refused"), strings.Contains(msg, "no such host"),
		strings.Contains(msg, "i/o timeout"), strings.Contains(msg, "EOF"):
		return "is Consul running there? Set the consul address or CONSUL_HTTP_ADDR to its HTTP API; a running osm-server keeps serving its last good view and retries, refusing writes until Consul answers"
	case strings.Contains(msg, "certificate"), strings.Contains(msg, "tls:"), strings.Contains(msg, "HTTP response to HTTPS"):
		return "check the consul scheme, CA file, client certificate and server name (CONSUL_HTTP_SSL, CONSUL_CACERT, ...)"
	case strings.Contains(msg, "No path to datacenter"):
		return "check the consul datacenter"
	}
	return "Consul refused or failed the request; the caller retries"
}

func (s *Store) query(ctx context.Context) *api.QueryOptions {
	return (&api.QueryOptions{}).WithContext(ctx)
}

// Get implements store.Store.
func (s *Store) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	p, _, err := s.kv.Get(s.prefix+key, s.query(ctx))
	if err != nil {
		return nil, 0, s.errorf(err, "get %s%s", s.prefix, key)
	}
	if p == nil {
		return nil, 0, nil
	}
	return p.Value, p.ModifyIndex, nil
}

// List implements store.Store; Consul returns keys in byte order.
func (s *Store) List(ctx context.Context, prefix string) ([]store.KV, error) {
	ps, _, err := s.kv.List(s.prefix+prefix, s.query(ctx))
	if err != nil {
		return nil, s.errorf(err, "list %s%s", s.prefix, prefix)
	}
	out := make([]store.KV, 0, len(ps))
	for _, p := range ps {
		out = append(out, store.KV{Key: strings.TrimPrefix(p.Key, s.prefix), Value: p.Value, Version: p.ModifyIndex})
	}
	return out, nil
}

// ListVersions implements store.Store. Consul lists keys with their
// ModifyIndex only together with the values, so this is List less the
// values: it saves the caller's memory, not the transfer.
func (s *Store) ListVersions(ctx context.Context, prefix string) ([]store.KV, error) {
	kvs, err := s.List(ctx, prefix)
	for i := range kvs {
		kvs[i].Value = nil
	}
	return kvs, err
}

// CompareAndSwap implements store.Store.
func (s *Store) CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (uint64, bool, error) {
	resp, ok, err := s.do(ctx, []store.Op{store.Set(key, version, value)})
	if !ok || err != nil {
		return 0, ok, err
	}
	for _, r := range resp.Results {
		if r.KV != nil && r.KV.Key == s.prefix+key {
			return r.KV.ModifyIndex, true, nil
		}
	}
	return 0, false, fmt.Errorf("consul store at %s: set %s%s: Consul committed it but returned no index (unexpected Consul reply)", s.addr, s.prefix, key)
}

// Txn implements store.Store.
func (s *Store) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	_, ok, err := s.do(ctx, ops)
	return ok, err
}

func (s *Store) do(ctx context.Context, ops []store.Op) (*api.TxnResponse, bool, error) {
	if err := store.ValidateOps(ops); err != nil {
		return nil, false, err
	}
	tops, err := s.txnOps(ops)
	if err != nil {
		return nil, false, err
	}
	if len(tops) == 0 {
		return &api.TxnResponse{}, true, nil // only "any version" checks
	}
	ok, resp, _, err := s.txn.Txn(tops, s.query(ctx))
	if err != nil {
		return nil, false, s.errorf(err, "transaction of %d ops (first %s%s)", len(ops), s.prefix, ops[0].Key)
	}
	if ok {
		s.commits.Add(1)
		return resp, true, nil
	}
	s.conflicts.Add(1)
	// 409: every error a failed condition is a conflict; anything else
	// (an ACL refusal) is an error.
	var other []string
	for _, e := range resp.Errors {
		if !isConflict(e.What) {
			other = append(other, fmt.Sprintf("op %d: %s", e.OpIndex, e.What))
		}
	}
	if len(other) > 0 {
		err := errors.New(strings.Join(other, "; "))
		return nil, false, s.errorf(err, "transaction of %d ops refused", len(ops))
	}
	return resp, false, nil
}

// isConflict says whether a transaction error of Consul's KV state store
// (agent/consul/state/txn.go, kvs.go) is a failed version condition.
func isConflict(what string) bool {
	return strings.HasSuffix(what, "index is stale") || // cas, delete-cas
		strings.HasPrefix(what, "failed index check for key") || // check-index, another index
		strings.HasPrefix(what, "failed to check index, key") || // check-index, missing key
		strings.HasPrefix(what, "key ") && strings.HasSuffix(what, " exists") // check-not-exists
}

// txnOps translates ops and checks them against Consul's limits, so an
// oversized transaction fails here with a clear error rather than as an
// HTTP 413 from Consul.
func (s *Store) txnOps(ops []store.Op) (api.TxnOps, error) {
	if n, limit := len(ops), s.limits.MaxTxnOps; n > limit {
		return nil, fmt.Errorf("consul store: a transaction of %d ops (first %s%s) is over Consul's limit of %d ops: %w; split it into transactions of at most %d (store.MaxTxnOps)",
			n, s.prefix, ops[0].Key, limit, store.ErrTooLarge, limit)
	}
	out := make(api.TxnOps, 0, len(ops)+1)
	for _, op := range ops {
		kv := &api.KVTxnOp{Key: s.prefix + op.Key}
		switch op.Kind {
		case store.OpSet:
			// Consul skips a write that changes nothing (value, flags,
			// session), keeping the ModifyIndex and waking no watch; the
			// contract bumps the version at every Set. A fresh nonce in
			// the opaque Flags makes every Set a change.
			kv.Value, kv.Flags = op.Value, rand.Uint64()
			if op.Version == store.AnyVersion {
				kv.Verb = api.KVSet
			} else {
				kv.Verb, kv.Index = api.KVCAS, op.Version // 0: only if absent
			}
		case store.OpDelete:
			switch op.Version {
			case store.AnyVersion:
				kv.Verb = api.KVDelete
			case 0:
				kv.Verb = api.KVCheckNotExists // deleting what must be absent
			default:
				// delete-cas of a missing key succeeds in Consul; the
				// contract wants the key at that version: check, then
				// delete (two Consul ops for one, within Consul 1.20's
				// 128 for store.MaxTxnOps).
				out = append(out, &api.TxnOp{KV: &api.KVTxnOp{Verb: api.KVCheckIndex, Key: kv.Key, Index: op.Version}})
				kv.Verb = api.KVDelete
			}
		case store.OpCheck:
			switch op.Version {
			case store.AnyVersion:
				continue
			case 0:
				kv.Verb = api.KVCheckNotExists
			default:
				kv.Verb, kv.Index = api.KVCheckIndex, op.Version
			}
		}
		out = append(out, &api.TxnOp{KV: kv})
	}
	// The request body as the client encodes it (json.Encoder, so a
	// trailing newline).
	body, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("consul store: encode transaction: %w", err)
	}
	if n, limit := len(body)+1, s.limits.MaxTxnBytes; n > limit {
		largest := ops[0]
		for _, op := range ops {
			if len(op.Value) > len(largest.Value) {
				largest = op
			}
		}
		return nil, fmt.Errorf("consul store: a transaction of %d ops is %d bytes encoded, over Consul's limit of %d (txn_max_req_len): %w; values travel base64-encoded, so keep a transaction's values under %d bytes in all (store.MaxTxnBytes; the largest here is %s%s, %d bytes)",
			len(ops), n, limit, store.ErrTooLarge, store.MaxTxnBytes, s.prefix, largest.Key, len(largest.Value))
	}
	return out, nil
}

// waitTime is how long one blocking query waits; Consul adds up to 1/16.
const waitTime = 5 * time.Minute

// Watch implements store.Store with a blocking query on the keys under
// the prefix, folded into one (see listing). The first query runs before Watch returns, so a commit made
// after it returns is always signalled. Watches end with ctx or Close.
func (s *Store) Watch(ctx context.Context, prefix string) <-chan struct{} {
	ch := make(chan struct{}, 1)
	ctx, cancel := context.WithCancel(ctx)
	id := new(int)
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		cancel()
		return ch
	}
	s.watches[id] = cancel
	s.wg.Add(1)
	s.mu.Unlock()

	w := &watch{s: s, prefix: s.prefix + prefix, ch: ch, log: s.log.With("watch", s.prefix+prefix), pace: s.pace}
	w.first(ctx)
	go func() {
		defer s.wg.Done()
		defer func() {
			s.mu.Lock()
			delete(s.watches, id)
			s.mu.Unlock()
			cancel()
		}()
		w.run(ctx)
	}()
	return ch
}
