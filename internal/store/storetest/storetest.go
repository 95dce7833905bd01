// Package storetest is the conformance suite of the store contract: every
// implementation of store.Store (memory, bbolt, Consul KV) calls [Run]
// from its tests, so they all keep the same semantics. It imports only
// internal/store, the standard library and go-cmp.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// Harness makes the stores the suite tests.
type Harness struct {
	// New returns an empty store, closed by its own t.Cleanup.
	New func(t *testing.T) store.Store
	// AsyncWatch is set when a watch learns of commits after they return
	// (Consul's blocking queries), so a signal cannot be expected at once.
	AsyncWatch bool
}

// Run runs every case of the suite, each on a fresh store.
func Run(t *testing.T, h Harness) {
	cases := []struct {
		name string
		fn   func(t *testing.T, h Harness, s store.Store)
	}{
		{"CompareAndSwap", testCompareAndSwap},
		{"VersionsIncreaseAcrossKeys", testVersionsIncreaseAcrossKeys},
		{"TxnAllOrNothing", testTxnAllOrNothing},
		{"TxnConditions", testTxnConditions},
		{"ListPrefixOrdered", testListPrefixOrdered},
		{"EmptyValue", testEmptyValue},
		{"IdenticalWriteIsACommit", testIdenticalWriteIsACommit},
		{"WatchCoalescesAndFilters", testWatchCoalescesAndFilters},
		{"WatchSeesDeletes", testWatchSeesDeletes},
		{"WatchLeavesOutItsWriter", testWatchLeavesOutItsWriter},
		{"WatchSeesEveryChangeEventually", testWatchSeesEveryChangeEventually},
		{"ConcurrentCASOneWinner", testConcurrentCASOneWinner},
		{"LimitsAccepted", testLimitsAccepted},
		{"LimitsRefused", testLimitsRefused},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) { c.fn(t, h, h.New(t)) })
	}
}

func testCompareAndSwap(t *testing.T, _ Harness, s store.Store) {
	ctx := t.Context()
	v, ver, err := s.Get(ctx, "a")
	if err != nil || v != nil || ver != 0 {
		t.Fatalf("Get(missing) = %q, %d, %v; want nil, 0, nil", v, ver, err)
	}
	v1, ok, err := s.CompareAndSwap(ctx, "a", 0, []byte("one"))
	if err != nil || !ok || v1 == 0 {
		t.Fatalf("create: %d %v %v", v1, ok, err)
	}
	if _, ok, err := s.CompareAndSwap(ctx, "a", 0, []byte("again")); ok || err != nil {
		t.Fatalf("create of an existing key: %v, %v; want false, nil", ok, err)
	}
	if _, ok, err := s.CompareAndSwap(ctx, "a", v1+100, []byte("x")); ok || err != nil {
		t.Fatalf("CAS with a wrong version: %v, %v; want false, nil", ok, err)
	}
	if _, ok, err := s.CompareAndSwap(ctx, "missing", v1, []byte("x")); ok || err != nil {
		t.Fatalf("CAS of a missing key at a version: %v, %v; want false, nil", ok, err)
	}
	v2, ok, err := s.CompareAndSwap(ctx, "a", v1, []byte("two"))
	if err != nil || !ok || v2 <= v1 {
		t.Fatalf("update: %d %v %v (previous version %d)", v2, ok, err, v1)
	}
	got, ver, _ := s.Get(ctx, "a")
	if string(got) != "two" || ver != v2 {
		t.Fatalf("Get = %q@%d, want two@%d", got, ver, v2)
	}
}

// Versions are opaque and increasing, not dense: callers must not expect
// 1, 2, 3 (Consul's are its Raft index, shared by every key).
func testVersionsIncreaseAcrossKeys(t *testing.T, _ Harness, s store.Store) {
	ctx := t.Context()
	var last uint64
	for i, k := range []string{"v/a", "v/b", "v/a", "v/c"} {
		_, cur, err := s.Get(ctx, k)
		if err != nil {
			t.Fatal(err)
		}
		ver, ok, err := s.CompareAndSwap(ctx, k, cur, []byte(strconv.Itoa(i)))
		if err != nil || !ok {
			t.Fatalf("write %d (%s): %v %v", i, k, ok, err)
		}
		if ver <= last {
			t.Fatalf("write %d (%s) got version %d after %d; want versions increasing across keys", i, k, ver, last)
		}
		last = ver
	}
}

func testTxnAllOrNothing(t *testing.T, _ Harness, s store.Store) {
	ctx := t.Context()
	ok, err := s.Txn(ctx, store.Set("token/1", 0, []byte("t")), store.Set("proxy/1", 0, []byte("p")))
	if err != nil || !ok {
		t.Fatalf("txn: %v %v", ok, err)
	}
	_, tv, _ := s.Get(ctx, "token/1")
	_, pv, _ := s.Get(ctx, "proxy/1")
	if tv != pv {
		t.Errorf("keys of one transaction have versions %d and %d; want one version", tv, pv)
	}
	// The second op's condition fails, so the first must not apply.
	ok, err = s.Txn(ctx, store.Set("token/1", tv, []byte("spent")), store.Set("proxy/1", 0, []byte("p2")))
	if err != nil || ok {
		t.Fatalf("conflicting txn: %v %v; want false, nil", ok, err)
	}
	if got, _, _ := s.Get(ctx, "token/1"); string(got) != "t" {
		t.Fatalf("token/1 = %q after a failed txn, want unchanged", got)
	}
	ok, err = s.Txn(ctx, store.Check("proxy/1", store.AnyVersion), store.Delete("token/1", tv))
	if err != nil || !ok {
		t.Fatalf("check+delete: %v %v", ok, err)
	}
	if diff := cmp.Diff([]string{"proxy/1"}, keys(t, s, "")); diff != "" {
		t.Errorf("keys (-want +got):\n%s", diff)
	}
	if _, err := s.Txn(ctx); err == nil {
		t.Error("empty txn: want an error")
	}
	if _, err := s.Txn(ctx, store.Set("k", store.AnyVersion, nil), store.Delete("k", store.AnyVersion)); err == nil {
		t.Error("a key written twice in one txn: want an error")
	}
}

func testTxnConditions(t *testing.T, _ Harness, s store.Store) {
	ctx := t.Context()
	ver, _, err := s.CompareAndSwap(ctx, "c/x", 0, []byte("x"))
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		ops  []store.Op
		want bool
	}{
		{"check at version", []store.Op{store.Check("c/x", ver)}, true},
		{"check at a wrong version", []store.Op{store.Check("c/x", ver+1)}, false},
		{"check absent of an existing key", []store.Op{store.Check("c/x", 0)}, false},
		{"check absent of a missing key", []store.Op{store.Check("c/none", 0)}, true},
		{"check any of a missing key", []store.Op{store.Check("c/none", store.AnyVersion)}, true},
		{"check a missing key at a version", []store.Op{store.Check("c/none", ver)}, false},
		{"delete absent of a missing key", []store.Op{store.Delete("c/none", 0)}, true},
		{"delete any of a missing key", []store.Op{store.Delete("c/none", store.AnyVersion)}, true},
		{"delete a missing key at a version", []store.Op{store.Delete("c/none", ver)}, false},
		{"delete at a wrong version", []store.Op{store.Delete("c/x", ver+1)}, false},
		{"set any, check failing", []store.Op{store.Set("c/y", store.AnyVersion, []byte("y")), store.Check("c/x", 0)}, false},
	} {
		ok, err := s.Txn(ctx, c.ops...)
		if err != nil || ok != c.want {
			t.Errorf("%s: Txn = %v, %v; want %v, nil", c.name, ok, err, c.want)
		}
	}
	if diff := cmp.Diff([]string{"c/x"}, keys(t, s, "c/")); diff != "" {
		t.Errorf("keys after the conditional txns (-want +got):\n%s", diff)
	}
	if got, gotVer, _ := s.Get(ctx, "c/x"); string(got) != "x" || gotVer != ver {
		t.Errorf("c/x = %q@%d, want x@%d: a failed or read-only txn wrote it", got, gotVer, ver)
	}
	ok, err := s.Txn(ctx, store.Set("c/x", store.AnyVersion, []byte("x2")), store.Delete("c/x2", store.AnyVersion))
	if err != nil || !ok {
		t.Fatalf("unconditional set: %v %v", ok, err)
	}
	if ok, err := s.Txn(ctx, store.Delete("c/x", store.AnyVersion)); err != nil || !ok {
		t.Fatalf("unconditional delete: %v %v", ok, err)
	}
	if got := keys(t, s, "c/"); len(got) != 0 {
		t.Errorf("keys after delete: %q, want none", got)
	}
}

func testListPrefixOrdered(t *testing.T, _ Harness, s store.Store) {
	ctx := t.Context()
	for _, k := range []string{"b/2", "a/1", "b/1", "b", "c/1", "b/10"} {
		if _, ok, err := s.CompareAndSwap(ctx, k, 0, []byte(k)); !ok || err != nil {
			t.Fatal(k, ok, err)
		}
	}
	kvs, err := s.List(ctx, "b/")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, kv := range kvs {
		got = append(got, kv.Key+"="+string(kv.Value))
	}
	if diff := cmp.Diff([]string{"b/1=b/1", "b/10=b/10", "b/2=b/2"}, got); diff != "" {
		t.Errorf("List(b/) (-want +got):\n%s", diff)
	}
	vs, err := s.ListVersions(ctx, "b/")
	if err != nil || len(vs) != 3 || vs[0].Key != "b/1" || vs[0].Value != nil || vs[0].Version != kvs[0].Version || vs[2].Version != kvs[2].Version {
		t.Errorf("ListVersions(b/) = %+v, %v; want b/1, b/10 and b/2 with List's versions and no values", vs, err)
	}
	for _, kv := range kvs {
		if _, ver, _ := s.Get(ctx, kv.Key); ver != kv.Version {
			t.Errorf("List says %s@%d, Get says @%d", kv.Key, kv.Version, ver)
		}
	}
	if kvs, err := s.List(ctx, "none/"); err != nil || len(kvs) != 0 {
		t.Errorf("List(none/) = %v, %v; want nothing", kvs, err)
	}
	if diff := cmp.Diff([]string{"a/1", "b", "b/1", "b/10", "b/2", "c/1"}, keys(t, s, "")); diff != "" {
		t.Errorf("List(\"\") (-want +got):\n%s", diff)
	}
}

func testEmptyValue(t *testing.T, _ Harness, s store.Store) {
	ctx := t.Context()
	ver, ok, err := s.CompareAndSwap(ctx, "e", 0, nil)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	got, gotVer, err := s.Get(ctx, "e")
	if err != nil || len(got) != 0 || gotVer != ver {
		t.Fatalf("Get(empty value) = %q@%d, %v; want empty@%d", got, gotVer, err, ver)
	}
}

// Writing the value a key already has is still a commit: a new version,
// and watchers signalled (Consul would skip it; its backend must not).
func testIdenticalWriteIsACommit(t *testing.T, _ Harness, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	v1, ok, err := s.CompareAndSwap(ctx, "same/k", 0, []byte("v"))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	ch := s.Watch(ctx, "same/")
	v2, ok, err := s.CompareAndSwap(ctx, "same/k", v1, []byte("v"))
	if err != nil || !ok || v2 <= v1 {
		t.Fatalf("rewrite of the same value: version %d after %d, %v, %v; want a higher version", v2, v1, ok, err)
	}
	if _, ver, _ := s.Get(ctx, "same/k"); ver != v2 {
		t.Fatalf("Get version %d, want %d", ver, v2)
	}
	select {
	case <-ch:
	case <-time.After(testwait.Bound(t)):
		t.Fatal("no notification for a rewrite of the same value")
	}
}

func testWatchCoalescesAndFilters(t *testing.T, h Harness, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ch := s.Watch(ctx, "cert/")
	if cap(ch) > 1 {
		t.Errorf("watch channel holds %d signals; want at most one pending (coalesced)", cap(ch))
	}
	mustSet(t, s, "other", nil)
	select {
	case <-ch:
		t.Fatal("notified for a key outside the prefix")
	default:
	}
	for i := range 5 {
		mustSet(t, s, fmt.Sprintf("cert/%d", i), nil)
	}
	select {
	case <-ch:
	case <-time.After(testwait.Bound(t)):
		t.Fatal("no notification for writes under the prefix")
	}
	if h.AsyncWatch {
		return // a later signal for the same writes is allowed
	}
	select {
	case <-ch:
		t.Fatal("five writes gave more than one queued signal")
	default:
	}
}

// A watch whose ctx carries a Writer is signalled for every other
// writer's commit, and a store whose commits all pass through this process
// leaves out that Writer's own.
func testWatchLeavesOutItsWriter(t *testing.T, h Harness, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	own, other := new(store.Writer), new(store.Writer)
	ch := s.Watch(store.WithWriter(ctx, own), "o/")
	if ok, err := s.Txn(store.WithWriter(ctx, own), store.Set("o/own", store.AnyVersion, []byte("x"))); err != nil || !ok {
		t.Fatal(ok, err)
	}
	if !h.AsyncWatch {
		select {
		case <-ch:
			t.Fatal("a watch was signalled for a commit of its own Writer")
		default:
		}
	}
	for _, c := range []struct {
		name string
		ctx  context.Context
	}{{"another Writer", store.WithWriter(ctx, other)}, {"no Writer", ctx}} {
		if ok, err := s.Txn(c.ctx, store.Set("o/"+c.name, store.AnyVersion, []byte("x"))); err != nil || !ok {
			t.Fatal(ok, err)
		}
		select {
		case <-ch:
		case <-time.After(testwait.Bound(t)):
			t.Fatalf("a watch with a Writer was not signalled for a commit with %s", c.name)
		}
	}
}

func testWatchSeesDeletes(t *testing.T, _ Harness, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	mustSet(t, s, "d/1", []byte("x"))
	ch := s.Watch(ctx, "d/")
	if ok, err := s.Txn(ctx, store.Delete("d/1", store.AnyVersion)); err != nil || !ok {
		t.Fatal(ok, err)
	}
	select {
	case <-ch:
	case <-time.After(testwait.Bound(t)):
		t.Fatal("no notification for a delete under the prefix")
	}
}

// A reader that re-reads at every signal ends at the last write, however
// the signals coalesce.
func testWatchSeesEveryChangeEventually(t *testing.T, _ Harness, s store.Store) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	const writes = 40
	ch := s.Watch(ctx, "w/")
	errc := make(chan error, 1)
	go func() {
		for i := 1; i <= writes; i++ {
			if _, err := s.Txn(ctx, store.Set("w/k", store.AnyVersion, []byte(strconv.Itoa(i)))); err != nil {
				errc <- err
				return
			}
		}
		errc <- nil
	}()
	signals := 0
	deadline := time.After(testwait.Bound(t))
	for {
		select {
		case <-ch:
			signals++
		case err := <-errc:
			if err != nil {
				t.Fatal(err)
			}
			continue
		case <-deadline:
			t.Fatalf("after %d signals w/k is not at write %d", signals, writes)
		}
		v, _, err := s.Get(ctx, "w/k")
		if err != nil {
			t.Fatal(err)
		}
		if string(v) == strconv.Itoa(writes) {
			t.Logf("%d writes, %d signals", writes, signals)
			return
		}
	}
}

func testConcurrentCASOneWinner(t *testing.T, _ Harness, s store.Store) {
	ctx := t.Context()
	var wg sync.WaitGroup
	wins := make(chan int, 20)
	errs := make(chan error, 20)
	for i := range 20 {
		wg.Go(func() {
			_, ok, err := s.CompareAndSwap(ctx, "lock", 0, []byte(strconv.Itoa(i)))
			if err != nil {
				errs <- err
			}
			if ok {
				wins <- i
			}
		})
	}
	wg.Wait()
	close(wins)
	close(errs)
	for err := range errs {
		t.Errorf("a losing CAS returned an error, want false, nil: %v", err)
	}
	if n := len(wins); n != 1 {
		t.Fatalf("%d writers created the key, want exactly 1", n)
	}
}

// Transactions at the portable limits commit on every backend.
func testLimitsAccepted(t *testing.T, _ Harness, s store.Store) {
	ctx := t.Context()
	var ops []store.Op
	for i := range store.MaxTxnOps {
		ops = append(ops, store.Set(fmt.Sprintf("l/%03d", i), 0, []byte("v")))
	}
	if ok, err := s.Txn(ctx, ops...); err != nil || !ok {
		t.Fatalf("a txn of MaxTxnOps (%d) ops: %v, %v; want it committed", len(ops), ok, err)
	}
	if n := len(keys(t, s, "l/")); n != store.MaxTxnOps {
		t.Fatalf("%d keys after the txn, want %d", n, store.MaxTxnOps)
	}
	big := make([]byte, store.MaxTxnBytes-len("l/big"))
	for i := range big {
		big[i] = byte(i * 7)
	}
	if _, ok, err := s.CompareAndSwap(ctx, "l/big", 0, big); err != nil || !ok {
		t.Fatalf("a value of MaxTxnBytes less its key (%d bytes): %v, %v; want it stored", len(big), ok, err)
	}
	if got, _, err := s.Get(ctx, "l/big"); err != nil || !slices.Equal(got, big) {
		t.Fatalf("Get(l/big): %d bytes, %v; want the %d bytes written", len(got), err, len(big))
	}
	// A backend that says it takes larger transactions (store.Limited)
	// takes one at its own limit.
	if maxOps, _ := store.TxnLimits(s); maxOps > store.MaxTxnOps {
		ops = ops[:0]
		for i := range maxOps {
			ops = append(ops, store.Set(fmt.Sprintf("m/%05d", i), 0, []byte("v")))
		}
		if ok, err := s.Txn(ctx, ops...); err != nil || !ok {
			t.Fatalf("a txn of the store's own limit of %d ops: %v, %v; want it committed", maxOps, ok, err)
		}
		if n := len(keys(t, s, "m/")); n != maxOps {
			t.Fatalf("%d keys after the txn, want %d", n, maxOps)
		}
	}
}

// testLimitsRefused: one op or one byte over the limits is refused with
// ErrTooLarge on every backend, and nothing of it is applied.
func testLimitsRefused(t *testing.T, _ Harness, s store.Store) {
	ctx := t.Context()
	maxOps, maxBytes := store.TxnLimits(s) // store.MaxTxnOps and MaxTxnBytes unless the store says more
	var ops []store.Op
	for i := range maxOps + 1 {
		ops = append(ops, store.Set(fmt.Sprintf("r/%05d", i), 0, []byte("v")))
	}
	if ok, err := s.Txn(ctx, ops...); ok || !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("a txn of its limit (%d) + 1 ops: %v, %v; want ErrTooLarge", maxOps, ok, err)
	}
	// Over Consul's 512 KiB value (and request) limit too.
	big := make([]byte, max(512<<10, maxBytes+1))
	if _, ok, err := s.CompareAndSwap(ctx, "r/big", 0, big); ok || !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("a value of %d bytes: %v, %v; want ErrTooLarge", len(big), ok, err)
	}
	if n := len(keys(t, s, "r/")); n != 0 {
		t.Errorf("%d keys after refused transactions, want 0", n)
	}
}

func mustSet(t *testing.T, s store.Store, key string, value []byte) {
	t.Helper()
	if ok, err := s.Txn(t.Context(), store.Set(key, store.AnyVersion, value)); err != nil || !ok {
		t.Fatalf("set %s: %v, %v", key, ok, err)
	}
}

func keys(t *testing.T, s store.Store, prefix string) []string {
	t.Helper()
	kvs, err := s.List(t.Context(), prefix)
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, kv := range kvs {
		out = append(out, kv.Key)
	}
	return out
}
