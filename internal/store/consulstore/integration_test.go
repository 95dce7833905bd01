//go:build consulintegration

package consulstore_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	neturl "net/url"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/consulstore"
	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/internal/store/storetest"
)

// Run with a real Consul: make test, or
//
//	OSM_CONSUL_BIN=$(hack/build-consul.sh) go test -tags consulintegration ./internal/store/...

// eventually bounds waits for a condition; nothing sleeps for it.
const eventually = 30 * time.Second

func logger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelDebug}))
}

func open(t *testing.T, cfg consulstore.Config) *consulstore.Store {
	t.Helper()
	s, err := consulstore.Open(t.Context(), cfg, logger(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// TestConformance runs the store contract on one dev Consul, each case
// under its own key prefix.
func TestConformance(t *testing.T) {
	agent := consultest.StartDev(t)
	var n atomic.Int64
	storetest.Run(t, storetest.Harness{
		AsyncWatch: true,
		New: func(t *testing.T) store.Store {
			return open(t, consulstore.Config{Address: agent.HTTPAddr, KeyPrefix: fmt.Sprintf("osm-test/%d/", n.Add(1))})
		},
	})
}

// Two osm-servers on one Consul: each sees the other's commits, through
// Get and through Watch, and their CAS races have one winner.
func TestTwoServersShareState(t *testing.T) {
	agent := consultest.StartDev(t)
	cfg := consulstore.Config{Address: agent.HTTPAddr}
	a, b := open(t, cfg), open(t, cfg)
	ctx := t.Context()
	ch := b.Watch(ctx, "proxy/")
	ver, ok, err := a.CompareAndSwap(ctx, "proxy/p1", 0, []byte("from a"))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	select {
	case <-ch:
	case <-time.After(eventually):
		t.Fatal("b's watch did not see a's write")
	}
	got, gotVer, err := b.Get(ctx, "proxy/p1")
	if err != nil || string(got) != "from a" || gotVer != ver {
		t.Fatalf("b reads %q@%d, %v; want a's write @%d", got, gotVer, err, ver)
	}
	if _, ok, err := b.CompareAndSwap(ctx, "proxy/p1", ver, []byte("from b")); !ok || err != nil {
		t.Fatal(ok, err)
	}
	if _, ok, err := a.CompareAndSwap(ctx, "proxy/p1", ver, []byte("stale a")); ok || err != nil {
		t.Fatalf("a's CAS at a version b replaced: %v, %v; want false, nil", ok, err)
	}
}

// Two meshes on one Consul, under their own prefixes, see nothing of
// each other.
func TestKeyPrefixIsolatesMeshes(t *testing.T) {
	agent := consultest.StartDev(t)
	a := open(t, consulstore.Config{Address: agent.HTTPAddr, KeyPrefix: "osm/east/"})
	b := open(t, consulstore.Config{Address: agent.HTTPAddr, KeyPrefix: "osm/west/"})
	ctx := t.Context()
	for _, s := range []*consulstore.Store{a, b} {
		if _, ok, err := s.CompareAndSwap(ctx, "spec", 0, []byte("x")); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	kvs, err := a.List(ctx, "")
	if err != nil || len(kvs) != 1 || kvs[0].Key != "spec" {
		t.Fatalf("east lists %+v, %v; want its one key, named without the prefix", kvs, err)
	}
	client, _ := api.NewClient(&api.Config{Address: agent.HTTPAddr})
	keys, _, err := client.KV().Keys("osm/", "", nil)
	if err != nil || strings.Join(keys, " ") != "osm/east/spec osm/west/spec" {
		t.Fatalf("Consul holds %q, %v; want osm/east/spec osm/west/spec", keys, err)
	}
}

// A Consul that comes back empty (its data dir lost, a snapshot restored)
// sends an index lower than the watch's: the watch resets, signals, and
// keeps seeing commits; while Consul is down it backs off.
func TestWatchSurvivesConsulRestart(t *testing.T) {
	agent := consultest.StartDev(t)
	s := open(t, consulstore.Config{Address: agent.HTTPAddr})
	ctx := t.Context()
	for i := range 30 { // push the index well past where a fresh Consul starts
		if _, err := s.Txn(ctx, store.Set("p/x", store.AnyVersion, []byte(fmt.Sprint(i)))); err != nil {
			t.Fatal(err)
		}
	}
	_, before, _ := s.Get(ctx, "p/x")
	ch := s.Watch(ctx, "p/")
	agent.Restart(t)
	select {
	case <-ch:
	case <-time.After(eventually):
		t.Fatal("no signal after Consul came back with a lower index")
	}
	if got, _, err := s.Get(ctx, "p/x"); err != nil || got != nil {
		t.Fatalf("after the restart p/x = %q, %v; want gone (dev Consul keeps nothing)", got, err)
	}
	ver, ok, err := s.CompareAndSwap(ctx, "p/y", 0, []byte("after"))
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	t.Logf("index before the restart %d, after %d", before, ver)
	select {
	case <-ch:
	case <-time.After(eventually):
		t.Fatal("no signal for a write after the reset")
	}
}

// A watch's blocking query answers with one key, however many are under
// the prefix: a listing of them all would move every key again after
// each commit (about 0.7 MB for 10,000 proxy records).
func TestWatchAnswersAreOneKey(t *testing.T) {
	agent := consultest.StartDev(t)
	var listings, listed atomic.Int64
	target, err := neturl.Parse("http://" + agent.HTTPAddr)
	if err != nil {
		t.Fatal(err)
	}
	rp := httputil.NewSingleHostReverseProxy(target)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Query().Has("keys") {
			listings.Add(1)
			w = &countingWriter{ResponseWriter: w, n: &listed}
		}
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	s := open(t, consulstore.Config{Address: srv.Listener.Addr().String()})
	ctx := t.Context()
	const keys = 2000
	for i := 0; i < keys; i += store.MaxTxnOps {
		var ops []store.Op
		for j := i; j < min(i+store.MaxTxnOps, keys); j++ {
			ops = append(ops, store.Set(fmt.Sprintf("big/proxy-%05d", j), store.AnyVersion, []byte("x")))
		}
		if ok, err := s.Txn(ctx, ops...); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	ch := s.Watch(ctx, "big/")
	const commits = 5
	for i := range commits {
		if _, err := s.Txn(ctx, store.Set(fmt.Sprintf("big/proxy-%05d", i), store.AnyVersion, []byte("y"))); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(eventually):
			t.Fatalf("no signal for commit %d under a prefix of %d keys", i, keys)
		}
	}
	n, b := listings.Load(), listed.Load()
	if n < commits {
		t.Fatalf("%d listings for %d signals", n, commits)
	}
	client, _ := api.NewClient(&api.Config{Address: agent.HTTPAddr})
	all, _, err := client.KV().Keys("osm/big/", "", nil)
	if err != nil || len(all) != keys {
		t.Fatalf("Consul lists %d keys, %v; want %d", len(all), err, keys)
	}
	if per := b / n; per > 64 {
		t.Errorf("a watch's answer was %d bytes on average over %d listings; want one key's (a listing of the %d keys is %d bytes)", per, n, keys, len(strings.Join(all, `","`))+4)
	}
	t.Logf("%d listings, %d bytes in all", n, b)
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (w *countingWriter) Write(b []byte) (int, error) {
	w.n.Add(int64(len(b)))
	return w.ResponseWriter.Write(b)
}

// Consul's own limits, past the store's checks: what the checks guard.
func TestConsulLimits(t *testing.T) {
	agent := consultest.StartDev(t)
	ctx := t.Context()
	raised := open(t, consulstore.Config{Address: agent.HTTPAddr, MaxTxnOps: 1000, MaxTxnBytes: 4 << 20})
	var ops []store.Op
	for i := range 129 {
		ops = append(ops, store.Set(fmt.Sprintf("l/%d", i), 0, nil))
	}
	_, err := raised.Txn(ctx, ops...)
	if err == nil || !strings.Contains(err.Error(), "too many operations") {
		t.Errorf("129 ops sent to Consul: %v; want Consul's refusal", err)
	}
	_, _, err = raised.CompareAndSwap(ctx, "big", 0, make([]byte, 400<<10))
	if err == nil || !strings.Contains(err.Error(), "too large") {
		t.Errorf("a 400 KiB value sent to Consul: %v; want Consul's refusal (512 KiB body, base64)", err)
	}
	s := open(t, consulstore.Config{Address: agent.HTTPAddr})
	if _, err := s.Txn(ctx, ops...); !errors.Is(err, store.ErrTooLarge) {
		t.Errorf("129 ops with the default limits: %v; want ErrTooLarge before sending", err)
	}
}

// With ACLs on, a token limited to the mesh's prefix works and one
// without it is refused with the fix named.
func TestACLToken(t *testing.T) {
	const root = "3f1c7a52-0000-4000-8000-000000000001"
	agent := consultest.StartDev(t, `acl { enabled = true, default_policy = "deny", tokens { initial_management = "`+root+`" } }`)
	client, err := api.NewClient(&api.Config{Address: agent.HTTPAddr, Token: root})
	if err != nil {
		t.Fatal(err)
	}
	pol, _, err := client.ACL().PolicyCreate(&api.ACLPolicy{Name: "osm", Rules: `key_prefix "osm/" { policy = "write" }`}, nil)
	if err != nil {
		t.Fatal(err)
	}
	tok, _, err := client.ACL().TokenCreate(&api.ACLToken{Policies: []*api.ACLTokenPolicyLink{{ID: pol.ID}}}, nil)
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, consulstore.Config{Address: agent.HTTPAddr, Token: tok.SecretID})
	if _, ok, err := s.CompareAndSwap(t.Context(), "ca", 0, []byte("root")); !ok || err != nil {
		t.Fatalf("write with the mesh's token: %v, %v", ok, err)
	}
	_, err = consulstore.Open(t.Context(), consulstore.Config{Address: agent.HTTPAddr, Token: tok.SecretID, KeyPrefix: "other/"}, logger(t))
	if err == nil || !strings.Contains(err.Error(), `key_prefix "other/"`) {
		t.Errorf("Open of a prefix the token may not read: %v; want the fix named", err)
	}
	_, err = consulstore.Open(t.Context(), consulstore.Config{Address: agent.HTTPAddr, Token: "00000000-0000-4000-8000-00000000dead"}, logger(t))
	if err == nil || !strings.Contains(err.Error(), "ACL token") {
		t.Errorf("Open with an unknown token: %v; want the token named", err)
	}
}

// TestFigures logs what a dev Consul on this machine costs per operation.
func TestFigures(t *testing.T) {
	agent := consultest.StartDev(t)
	s := open(t, consulstore.Config{Address: agent.HTTPAddr})
	ctx := context.Background()
	const n = 200
	start := time.Now()
	var ver uint64
	for i := range n {
		v, ok, err := s.CompareAndSwap(ctx, "fig/k", ver, []byte(fmt.Sprint(i)))
		if !ok || err != nil {
			t.Fatal(ok, err)
		}
		ver = v
	}
	cas := time.Since(start) / n
	start = time.Now()
	for range n {
		if _, _, err := s.Get(ctx, "fig/k"); err != nil {
			t.Fatal(err)
		}
	}
	get := time.Since(start) / n
	var ops []store.Op
	for i := range store.MaxTxnOps {
		ops = append(ops, store.Set(fmt.Sprintf("fig/t/%02d", i), store.AnyVersion, make([]byte, 1024)))
	}
	start = time.Now()
	for range 20 {
		if ok, err := s.Txn(ctx, ops...); !ok || err != nil {
			t.Fatal(ok, err)
		}
	}
	txn := time.Since(start) / 20
	ch := s.Watch(ctx, "fig/w/")
	start = time.Now()
	for range 20 {
		if _, err := s.Txn(ctx, store.Set("fig/w/k", store.AnyVersion, nil)); err != nil {
			t.Fatal(err)
		}
		select {
		case <-ch:
		case <-time.After(eventually):
			t.Fatal("no signal")
		}
	}
	watch := time.Since(start) / 20
	t.Logf("dev Consul: CAS %v, Get %v, Txn of %d 1 KiB sets %v, write-to-watch-signal %v", cas, get, store.MaxTxnOps, txn, watch)
}

// TestDutyOneHolderAtATime: two replicas run one duty; exactly one runs it
// at any moment; when the holder stops, or its session is destroyed (what
// Consul does when it expires), its function's ctx ends at once and the
// other replica takes the duty over.
func TestDutyOneHolderAtATime(t *testing.T) {
	agent := consultest.StartDev(t)
	cfg := consulstore.Config{Address: agent.HTTPAddr, KeyPrefix: "osm-duty/"}
	stores := []*consulstore.Store{open(t, cfg), open(t, cfg)}
	var (
		running atomic.Int32 // how many run the duty now
		holder  atomic.Int32 // 1 + index of the one that runs it
		overlap atomic.Bool
	)
	ctxs := make([]context.CancelFunc, 2)
	done := make([]chan struct{}, 2)
	sessionEnded := make(chan int, 10)
	for i, s := range stores {
		ctx, cancel := context.WithCancel(t.Context())
		ctxs[i], done[i] = cancel, make(chan struct{})
		go func() {
			defer close(done[i])
			s.Duty("prune").Run(ctx, func(ctx context.Context) error {
				if running.Add(1) > 1 {
					overlap.Store(true)
				}
				holder.Store(int32(i + 1))
				<-ctx.Done()
				holder.CompareAndSwap(int32(i+1), 0)
				running.Add(-1)
				sessionEnded <- i
				return nil
			})
		}()
	}
	t.Cleanup(func() {
		for i := range ctxs {
			ctxs[i]()
			<-done[i]
		}
	})
	waitHolder := func(not int32) int32 {
		t.Helper()
		deadline := time.Now().Add(eventually)
		for {
			if h := holder.Load(); h != 0 && h != not {
				return h
			}
			if time.Now().After(deadline) {
				t.Fatalf("no replica took the duty within %s", eventually)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	first := waitHolder(0)

	// The holder's session is destroyed under it: its duty ends at once.
	client, err := api.NewClient(&api.Config{Address: agent.HTTPAddr})
	if err != nil {
		t.Fatal(err)
	}
	pair, _, err := client.KV().Get("osm-duty/duty/prune", nil)
	if err != nil || pair == nil || pair.Session == "" {
		t.Fatalf("lock key: %+v, %v; want it held by a session", pair, err)
	}
	if _, err := client.Session().Destroy(pair.Session, nil); err != nil {
		t.Fatal(err)
	}
	select {
	case i := <-sessionEnded:
		if int32(i+1) != first {
			t.Errorf("replica %d's duty ended, want the holder's (%d)", i+1, first)
		}
	case <-time.After(eventually):
		t.Fatal("the holder kept running its duty after its session was destroyed")
	}
	second := waitHolder(0)

	// The holder stops (shuts down): the other one takes over.
	ctxs[second-1]()
	<-done[second-1]
	if got := waitHolder(second); got == second {
		t.Errorf("replica %d still holds the duty after it stopped", got)
	}
	if overlap.Load() {
		t.Error("two replicas ran the duty at once")
	}
}
