package store

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

// impls runs a test against both implementations.
func impls(t *testing.T, fn func(t *testing.T, s Store)) {
	t.Run("memory", func(t *testing.T) { fn(t, NewMemory()) })
	t.Run("bolt", func(t *testing.T) {
		b, err := OpenBolt(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		fn(t, b)
	})
}

func TestCompareAndSwap(t *testing.T) {
	impls(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		v, ver, err := s.Get(ctx, "a")
		if err != nil || v != nil || ver != 0 {
			t.Fatalf("Get(missing) = %q, %d, %v; want nil, 0, nil", v, ver, err)
		}
		v1, ok, err := s.CompareAndSwap(ctx, "a", 0, []byte("one"))
		if err != nil || !ok || v1 == 0 {
			t.Fatalf("create: %d %v %v", v1, ok, err)
		}
		if _, ok, _ := s.CompareAndSwap(ctx, "a", 0, []byte("again")); ok {
			t.Fatal("create of an existing key succeeded")
		}
		if _, ok, _ := s.CompareAndSwap(ctx, "a", v1+100, []byte("x")); ok {
			t.Fatal("CAS with a wrong version succeeded")
		}
		v2, ok, err := s.CompareAndSwap(ctx, "a", v1, []byte("two"))
		if err != nil || !ok || v2 <= v1 {
			t.Fatalf("update: %d %v %v (previous version %d)", v2, ok, err, v1)
		}
		got, ver, _ := s.Get(ctx, "a")
		if string(got) != "two" || ver != v2 {
			t.Fatalf("Get = %q@%d, want two@%d", got, ver, v2)
		}
	})
}

func TestTxnAllOrNothing(t *testing.T) {
	impls(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		ok, err := s.Txn(ctx, Set("token/1", 0, []byte("t")), Set("proxy/1", 0, []byte("p")))
		if err != nil || !ok {
			t.Fatalf("txn: %v %v", ok, err)
		}
		_, tv, _ := s.Get(ctx, "token/1")
		// The second op's condition fails, so the first must not apply.
		ok, err = s.Txn(ctx, Set("token/1", tv, []byte("spent")), Set("proxy/1", 0, []byte("p2")))
		if err != nil || ok {
			t.Fatalf("conflicting txn: %v %v; want false, nil", ok, err)
		}
		if got, _, _ := s.Get(ctx, "token/1"); string(got) != "t" {
			t.Fatalf("token/1 = %q after a failed txn, want unchanged", got)
		}
		ok, err = s.Txn(ctx, Check("proxy/1", AnyVersion), Delete("token/1", tv))
		if err != nil || !ok {
			t.Fatalf("check+delete: %v %v", ok, err)
		}
		kvs, _ := s.List(ctx, "")
		var keys []string
		for _, kv := range kvs {
			keys = append(keys, kv.Key)
		}
		if diff := cmp.Diff([]string{"proxy/1"}, keys); diff != "" {
			t.Errorf("keys (-want +got):\n%s", diff)
		}
		if _, err := s.Txn(ctx); err == nil {
			t.Error("empty txn: want an error")
		}
		if _, err := s.Txn(ctx, Set("k", AnyVersion, nil), Delete("k", AnyVersion)); err == nil {
			t.Error("a key written twice in one txn: want an error")
		}
	})
}

func TestListPrefixOrdered(t *testing.T) {
	impls(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		for _, k := range []string{"b/2", "a/1", "b/1", "b", "c/1"} {
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
		if diff := cmp.Diff([]string{"b/1=b/1", "b/2=b/2"}, got); diff != "" {
			t.Errorf("List(b/) (-want +got):\n%s", diff)
		}
		vs, err := s.ListVersions(ctx, "b/")
		if err != nil || len(vs) != 2 || vs[0].Key != "b/1" || vs[0].Value != nil || vs[0].Version != kvs[0].Version || vs[1].Version != kvs[1].Version {
			t.Errorf("ListVersions(b/) = %+v, %v; want b/1 and b/2 with List's versions and no values", vs, err)
		}
	})
}

func TestWatchCoalescesAndFilters(t *testing.T) {
	impls(t, func(t *testing.T, s Store) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		ch := s.Watch(ctx, "cert/")
		s.CompareAndSwap(ctx, "other", 0, nil)
		select {
		case <-ch:
			t.Fatal("notified for a key outside the prefix")
		default:
		}
		for i := range 5 {
			s.CompareAndSwap(ctx, fmt.Sprintf("cert/%d", i), 0, nil)
		}
		select {
		case <-ch:
		case <-time.After(5 * time.Second):
			t.Fatal("no notification for writes under the prefix")
		}
		select {
		case <-ch:
			t.Fatal("five writes gave more than one queued signal")
		default:
		}
	})
}

func TestConcurrentCASOneWinner(t *testing.T) {
	impls(t, func(t *testing.T, s Store) {
		ctx := context.Background()
		var wg sync.WaitGroup
		wins := make(chan int, 20)
		for i := range 20 {
			wg.Go(func() {
				if _, ok, err := s.CompareAndSwap(ctx, "lock", 0, []byte(strconv.Itoa(i))); err == nil && ok {
					wins <- i
				}
			})
		}
		wg.Wait()
		close(wins)
		if n := len(wins); n != 1 {
			t.Fatalf("%d writers created the key, want exactly 1", n)
		}
	})
}

func TestBoltPersistsAndLocks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	b, err := OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ver, _, _ := b.CompareAndSwap(ctx, "ca", 0, []byte("root"))
	if _, err := OpenBolt(dir); err == nil {
		t.Fatal("a second open of a held data dir succeeded")
	} else if want := "locked by another process"; !strings.Contains(err.Error(), want) {
		t.Fatalf("second open: %v; want it to say %q", err, want)
	}
	b.Close()
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, FileName): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode %o, want %o", path, got, want)
		}
	}
	b, err = OpenBolt(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	got, gotVer, _ := b.Get(ctx, "ca")
	if string(got) != "root" || gotVer != ver {
		t.Fatalf("after reopen: %q@%d, want root@%d", got, gotVer, ver)
	}
	next, ok, _ := b.CompareAndSwap(ctx, "x", 0, nil)
	if !ok || next <= ver {
		t.Fatalf("version after reopen %d, want > %d (versions never go back)", next, ver)
	}
}

// TestBoltSurvivesSIGKILL kills a writer process mid-stream many times and
// checks that every reopen sees a consistent pair of keys written together.
func TestBoltSurvivesSIGKILL(t *testing.T) {
	dir := t.TempDir()
	for round := range 5 {
		cmd := exec.Command(os.Args[0])
		cmd.Env = append(os.Environ(), "OSM_STORE_WRITER="+dir)
		out, err := cmd.StdoutPipe()
		if err != nil {
			t.Fatal(err)
		}
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1)
		out.Read(buf) // the writer says it is writing
		time.Sleep(time.Duration(20+round*15) * time.Millisecond)
		cmd.Process.Kill()
		cmd.Wait()

		b, err := OpenBolt(dir)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		a, _, _ := b.Get(context.Background(), "pair/a")
		c, _, _ := b.Get(context.Background(), "pair/b")
		b.Close()
		if string(a) != string(c) {
			t.Fatalf("round %d: pair/a=%q pair/b=%q: a transaction was half applied", round, a, c)
		}
		if len(a) == 0 {
			t.Fatalf("round %d: the writer committed nothing before it was killed; the test proves nothing", round)
		}
	}
}

// TestMain runs the writer helper process of TestBoltSurvivesSIGKILL when
// OSM_STORE_WRITER names a data dir: it commits two-key transactions until
// it is killed.
func TestMain(m *testing.M) {
	dir := os.Getenv("OSM_STORE_WRITER")
	if dir == "" {
		os.Exit(m.Run())
	}
	b, err := OpenBolt(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	os.Stdout.Write([]byte("w"))
	ctx := context.Background()
	for i := 0; ; i++ {
		v := []byte(strconv.Itoa(i))
		if _, err := b.Txn(ctx, Set("pair/a", AnyVersion, v), Set("pair/b", AnyVersion, v)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
	}
}
