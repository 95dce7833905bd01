package consulstore

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testaddr"
)

// These tests use a fake Consul HTTP API: errors, limits and the watch's
// index rules, where a real Consul cannot be made to misbehave on cue.
// integration_test.go (tag consulintegration) runs the contract against a
// real one.

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// fakeConsul answers ?keys reads from a script of indexes and counts
// requests by path.
type fakeConsul struct {
	mu      sync.Mutex
	hits    map[string]int
	waits   []string // the index= of each ?keys query
	lists   []string // the path and separator= of each ?keys query
	indexes []uint64 // X-Consul-Index of successive ?keys queries; the last repeats
	keys    string   // the JSON body of ?keys
	status  int      // when set, every request fails with it
	txnBody string   // the body of a 409 /v1/txn answer
	queried chan struct{}
	// hang, when set, holds every blocking ?keys query (one with an
	// index) unanswered until the client gives up: a query sent over a
	// connection whose answer is lost.
	hang bool
}

func (f *fakeConsul) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.mu.Lock()
	if f.hang && r.URL.Query().Has("keys") && r.URL.Query().Get("index") != "" {
		f.waits = append(f.waits, r.URL.Query().Get("index"))
		f.mu.Unlock()
		<-r.Context().Done()
		return
	}
	defer f.mu.Unlock()
	f.hits[r.URL.Path]++
	io.Copy(io.Discard, r.Body)
	if f.status != 0 {
		http.Error(w, "Permission denied: token lacks key:read on \"osm/\"", f.status)
		return
	}
	switch {
	case r.URL.Path == "/v1/txn":
		w.WriteHeader(http.StatusConflict)
		io.WriteString(w, f.txnBody)
	case r.URL.Query().Has("keys"):
		f.waits = append(f.waits, r.URL.Query().Get("index"))
		f.lists = append(f.lists, r.URL.Path+" "+r.URL.Query().Get("separator"))
		idx := f.indexes[min(len(f.waits)-1, len(f.indexes)-1)]
		w.Header().Set("X-Consul-Index", strconv.FormatUint(idx, 10))
		io.WriteString(w, f.keys)
		if f.queried != nil {
			select {
			case f.queried <- struct{}{}:
			default:
			}
		}
	default:
		http.NotFound(w, r)
	}
}

func startFake(t *testing.T, f *fakeConsul) (*Store, *fakeConsul) {
	t.Helper()
	f.hits = map[string]int{}
	if f.keys == "" {
		f.keys = `["osm/a"]`
	}
	if f.indexes == nil {
		f.indexes = []uint64{10}
	}
	srv := httptest.NewServer(f)
	t.Cleanup(srv.Close)
	s, err := Open(t.Context(), Config{Address: srv.Listener.Addr().String(), Token: "t"}, testLogger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, f
}

func TestOpenUnreachableNamesAddressAndFix(t *testing.T) {
	addr := testaddr.Free(t) // nothing listens there, and no server bound on port 0 will
	_, err := Open(t.Context(), Config{Address: addr}, testLogger(t))
	if err == nil {
		t.Fatal("Open of an address nothing listens on succeeded")
	}
	for _, want := range []string{"http://" + addr, "connection refused", "CONSUL_HTTP_ADDR"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("Open error %q does not say %q", err, want)
		}
	}
}

func TestOpenForbiddenNamesThePrefix(t *testing.T) {
	f := &fakeConsul{status: http.StatusForbidden, hits: map[string]int{}}
	srv := httptest.NewServer(f)
	defer srv.Close()
	_, err := Open(t.Context(), Config{Address: srv.URL, KeyPrefix: "osm/prod/"}, testLogger(t))
	if err == nil || !strings.Contains(err.Error(), `key_prefix "osm/prod/" read and write`) {
		t.Fatalf("Open with a refused token: %v; want it to name the key_prefix the token needs", err)
	}
}

func TestConfig(t *testing.T) {
	t.Setenv("CONSUL_HTTP_ADDR", "consul.example:8501")
	t.Setenv("CONSUL_HTTP_SSL", "true")
	t.Setenv("CONSUL_HTTP_TOKEN", "from-env")
	t.Setenv("CONSUL_CACERT", "/etc/consul/ca.pem")
	ac := Config{Token: "explicit", Datacenter: "dc2"}.apiConfig()
	if ac.Address != "consul.example:8501" || ac.Scheme != "https" || ac.TLSConfig.CAFile != "/etc/consul/ca.pem" {
		t.Errorf("environment not applied: %s://%s CA %q", ac.Scheme, ac.Address, ac.TLSConfig.CAFile)
	}
	if ac.Token != "explicit" || ac.Datacenter != "dc2" {
		t.Errorf("explicit fields not applied: token %q dc %q", ac.Token, ac.Datacenter)
	}
	for _, c := range []struct {
		cfg  Config
		want string
	}{
		{Config{KeyPrefix: "osm"}, `must end with "/"`},
		{Config{KeyPrefix: "/osm/"}, `must end with "/"`},
		{Config{Scheme: "ftp"}, "want http or https"},
		{Config{Token: "a", TokenFile: "b"}, "use one"},
		{Config{CertFile: "c.pem"}, "set both or neither"},
	} {
		if err := c.cfg.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Validate(%+v) = %v; want %q", c.cfg, err, c.want)
		}
	}
	if err := (Config{}).Validate(); err != nil {
		t.Errorf("the zero Config: %v", err)
	}
}

func TestTxnOverLimitsRefusedBeforeSending(t *testing.T) {
	s, f := startFake(t, &fakeConsul{})
	var ops []store.Op
	for i := range store.MaxTxnOps + 1 {
		ops = append(ops, store.Set(fmt.Sprintf("k/%d", i), 0, nil))
	}
	_, err := s.Txn(t.Context(), ops...)
	if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), "65 ops") || !strings.Contains(err.Error(), "at most 64") {
		t.Errorf("txn of 65 ops: %v; want ErrTooLarge saying 65 ops, at most 64", err)
	}
	big := make([]byte, 400<<10)
	_, _, err = s.CompareAndSwap(t.Context(), "spec/v1/state", 0, big)
	if !errors.Is(err, store.ErrTooLarge) || !strings.Contains(err.Error(), "osm/spec/v1/state, 409600 bytes") {
		t.Errorf("CAS of a 400 KiB value: %v; want ErrTooLarge naming the key and its size", err)
	}
	half := make([]byte, 200<<10)
	_, err = s.Txn(t.Context(), store.Set("a", 0, half), store.Set("b", 0, half))
	if !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("txn of two 200 KiB values (over 512 KiB base64-encoded): %v; want ErrTooLarge", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if n := f.hits["/v1/txn"]; n != 0 {
		t.Errorf("%d transactions reached Consul; want none", n)
	}
}

func TestTxnConflictOrRefusal(t *testing.T) {
	for _, c := range []struct {
		name     string
		what     string
		conflict bool
	}{
		{"cas", `failed to set key \"osm/a\", index is stale`, true},
		{"delete-cas", `failed to delete key \"osm/a\", index is stale`, true},
		{"check-index", `failed index check for key \"osm/a\", current modify index 12 != 11`, true},
		{"check-index missing", `failed to check index, key \"osm/a\" doesn't exist`, true},
		{"check-not-exists", `key \"osm/a\" exists`, true},
		{"acl", `Permission denied: token with AccessorID 'x' lacks permission 'key:write' on \"osm/a\"`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			s, _ := startFake(t, &fakeConsul{txnBody: `{"Errors":[{"OpIndex":0,"What":"` + c.what + `"}]}`})
			ok, err := s.Txn(t.Context(), store.Set("a", 11, []byte("x")))
			if ok {
				t.Fatal("ok from a 409")
			}
			if c.conflict && err != nil {
				t.Errorf("conflict %q: error %v; want ok=false and no error", c.what, err)
			}
			if !c.conflict && (err == nil || !strings.Contains(err.Error(), "Permission denied") || !strings.Contains(err.Error(), "key_prefix")) {
				t.Errorf("refusal %q: error %v; want it returned with the fix", c.what, err)
			}
		})
	}
}

// recorder replaces sleeping: it records each wait and returns at once,
// stopping the watch after limit waits.
type recorder struct {
	mu     sync.Mutex
	waits  []time.Duration
	limit  int
	cancel context.CancelFunc
}

func (r *recorder) sleep(ctx context.Context, d time.Duration) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.waits = append(r.waits, d)
	if len(r.waits) >= r.limit {
		r.cancel()
	}
	return ctx.Err()
}

// runWatch runs a watch over the fake's index script until it has waited
// limit times, and returns its waits, the index each query sent and the
// signals it gave.
func runWatch(t *testing.T, f *fakeConsul, limit int) (waits []time.Duration, sent []string, signals int) {
	t.Helper()
	s, _ := startFake(t, f)
	ctx, cancel := context.WithCancel(t.Context())
	rec := &recorder{limit: limit, cancel: cancel}
	s.pace.sleep = rec.sleep
	s.pace.minInterval = 0 // only backoffs wait
	ch := make(chan struct{}, 100)
	w := &watch{s: s, prefix: "osm/", ch: ch, log: s.log, pace: s.pace}
	w.first(ctx)
	w.run(ctx)
	close(ch)
	for range ch {
		signals++
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return rec.waits, f.waits, signals
}

func TestWatchIndexBackwardsResets(t *testing.T) {
	f := &fakeConsul{indexes: []uint64{100, 120, 50, 60, 70}}
	waits, sent, signals := runWatch(t, f, 3)
	// first (no index) -> 100; wait on 100 -> 120: signal; wait on 120 ->
	// 50: backwards, reset; query without an index -> 60: the owed
	// signal; wait on 60 -> 70: signal; wait on 70 twice: back at once
	// unchanged, backing off.
	if want := []string{"", "100", "120", "", "60", "70", "70"}; fmt.Sprint(sent) != fmt.Sprint(want) {
		t.Errorf("queries sent index %q; want %q", sent, want)
	}
	if signals != 3 {
		t.Errorf("%d signals; want 3 (a change, after the reset, a change)", signals)
	}
	if waits[0] != defaultPacing.backoffMin {
		t.Errorf("waited %v after the index went backwards; want the backoff %v", waits[0], defaultPacing.backoffMin)
	}
}

func TestWatchNeverLoopsHot(t *testing.T) {
	for _, c := range []struct {
		name string
		f    *fakeConsul
	}{
		// A Consul (or proxy) answering at once with the same index.
		{"unchanged index", &fakeConsul{indexes: []uint64{7}}},
		// An index always going backwards.
		{"backwards every time", &fakeConsul{indexes: []uint64{1000, 900, 800, 700, 600, 500, 400, 300, 200, 100, 90, 80, 70}}},
		// Consul's bug of an index 0: wait on 1, never on 0.
		{"index zero", &fakeConsul{indexes: []uint64{0}}},
	} {
		t.Run(c.name, func(t *testing.T) {
			waits, sent, _ := runWatch(t, c.f, 10)
			for i, d := range waits {
				if d < defaultPacing.backoffMin {
					t.Fatalf("wait %d was %v; want at least %v between queries back at once (waits %v)", i, d, defaultPacing.backoffMin, waits)
				}
			}
			if last := waits[len(waits)-1]; last < 8*defaultPacing.backoffMin {
				t.Errorf("waits %v do not back off", waits)
			}
			if c.name == "index zero" {
				for i, idx := range sent[1:] {
					if idx != "1" {
						t.Errorf("query %d waited on index %q; want 1 (an index is at least 1)", i+1, idx)
					}
				}
			}
		})
	}
}

func TestWatchEmptyPrefixIgnoresOtherWrites(t *testing.T) {
	// An empty prefix's index is the whole table's, or its stem's
	// (listing): new indexes without a key under the prefix are other
	// keys' writes.
	for _, keys := range []string{`[]`, `["osm-staging/"]`} {
		f := &fakeConsul{keys: keys, indexes: []uint64{10, 11, 12, 13}}
		_, _, signals := runWatch(t, f, 4)
		if signals != 0 {
			t.Errorf("keys %s: %d signals for writes outside an empty prefix; want 0", keys, signals)
		}
	}
}

// A watch of "osm/" lists "osm" with the separator "/": every key under
// the prefix folds into one, where a plain listing would move them all
// after each commit.
func TestWatchListsTheStem(t *testing.T) {
	f := &fakeConsul{keys: `["osm/"]`, indexes: []uint64{10, 11}}
	_, _, signals := runWatch(t, f, 1)
	if signals == 0 {
		t.Error("no signal for a new index with the prefix's folded key")
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	for i, l := range f.lists {
		if l != "/v1/kv/osm /" {
			t.Errorf("listing %d was %q; want %q", i, l, "/v1/kv/osm /")
		}
	}
	for _, c := range []struct{ prefix, stem, sep string }{
		{"osm/certificate/proxy/", "osm/certificate/proxy", "/"},
		{"osm/certificate/session-tickets", "osm/certificate/session-tickets", ""},
		{"/", "/", ""},
	} {
		if stem, sep := listing(c.prefix); stem != c.stem || sep != c.sep {
			t.Errorf("listing(%q) = %q, %q; want %q, %q", c.prefix, stem, sep, c.stem, c.sep)
		}
	}
}

func TestWatchFirstQueryFailsThenSignals(t *testing.T) {
	f := &fakeConsul{}
	s, _ := startFake(t, f)
	f.mu.Lock()
	f.status = http.StatusInternalServerError
	f.mu.Unlock()
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	rec := &recorder{limit: 1 << 30, cancel: cancel}
	s.pace.sleep = func(ctx context.Context, d time.Duration) error {
		rec.sleep(ctx, d)
		f.mu.Lock()
		f.status = 0 // Consul is back after the first backoff
		f.mu.Unlock()
		return ctx.Err()
	}
	ch := s.Watch(ctx, "p/")
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no signal once Consul answered: the caller may have missed commits meanwhile")
	}
}

// TestWatchResync: a blocking query that will never be answered (its
// connection is dead) is dropped by Resync, and the watch asks again from
// index 0 at once and signals, instead of waiting out the query.
func TestWatchResync(t *testing.T) {
	f := &fakeConsul{hang: true, indexes: []uint64{10, 11}}
	s, _ := startFake(t, f)
	ch := s.Watch(t.Context(), "p/")
	// Wait for the blocking query on index 10, never answered.
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(5 * time.Millisecond) {
		f.mu.Lock()
		sent := len(f.waits)
		if sent == 2 {
			f.hang = false
		}
		f.mu.Unlock()
		if sent == 2 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the watch sent no blocking query")
		}
	}
	start := time.Now()
	s.Resync()
	select {
	case <-ch:
	case <-time.After(30 * time.Second):
		t.Fatal("no signal after Resync: the watch still waits on a query that will never be answered")
	}
	f.mu.Lock()
	sent := f.waits
	f.mu.Unlock()
	if want := []string{"", "10", ""}; fmt.Sprint(sent[:min(3, len(sent))]) != fmt.Sprint(want) {
		t.Errorf("queries sent index %q; want %q (the first, the dead blocking one, then from 0 again)", sent, want)
	}
	t.Logf("signalled %s after Resync", time.Since(start).Round(time.Millisecond))
}

func TestStep(t *testing.T) {
	long := waitTime // a query that blocked its full time
	for _, c := range []struct {
		name       string
		w          watch
		r          result
		wantSignal bool
		wantIndex  uint64
	}{
		{"new index, keys", watch{index: 5}, result{index: 6, elapsed: time.Second}, true, 6},
		{"new index, keys deleted", watch{index: 5}, result{index: 6, empty: true}, true, 6},
		{"new index, first key", watch{index: 5, empty: true}, result{index: 6}, true, 6},
		{"new index, still empty", watch{index: 5, empty: true}, result{index: 9, empty: true}, false, 9},
		{"timeout", watch{index: 5}, result{index: 5, elapsed: long}, false, 5},
		{"backwards", watch{index: 5}, result{index: 3}, false, 0},
		{"after reset, owed", watch{index: 0, pending: true}, result{index: 3, empty: true}, true, 3},
		{"zero", watch{index: 0}, result{index: 0}, false, 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			w := c.w
			w.pace, w.log = defaultPacing, slog.New(slog.DiscardHandler)
			signal, _ := w.step(c.r)
			if signal != c.wantSignal || w.index != c.wantIndex {
				t.Errorf("step = signal %v, index %d; want %v, %d", signal, w.index, c.wantSignal, c.wantIndex)
			}
		})
	}
}
