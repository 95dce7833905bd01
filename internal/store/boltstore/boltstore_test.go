package boltstore_test

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/boltstore"
	"github.com/osm-vm/osm-vm/internal/store/storetest"
)

func TestBolt(t *testing.T) {
	storetest.Run(t, storetest.Harness{New: func(t *testing.T) store.Store {
		b, err := boltstore.Open(t.TempDir())
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { b.Close() })
		return b
	}})
}

func TestBoltPersistsAndLocks(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "data")
	b, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	ver, _, _ := b.CompareAndSwap(ctx, "ca", 0, []byte("root"))
	if _, err := boltstore.Open(dir); err == nil {
		t.Fatal("a second open of a held data dir succeeded")
	} else if want := "locked by another process"; !strings.Contains(err.Error(), want) {
		t.Fatalf("second open: %v; want it to say %q", err, want)
	}
	b.Close()
	for path, want := range map[string]os.FileMode{dir: 0o700, filepath.Join(dir, boltstore.FileName): 0o600} {
		fi, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := fi.Mode().Perm(); got != want {
			t.Errorf("%s mode %o, want %o", path, got, want)
		}
	}
	b, err = boltstore.Open(dir)
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
		// The writer writes a byte after each commit: wait for a few
		// (more each round, so the kill lands at different points), then
		// kill it while it keeps committing.
		if _, err := io.ReadFull(out, make([]byte, 1+round*20)); err != nil {
			t.Fatalf("round %d: the writer stopped before committing: %v", round, err)
		}
		cmd.Process.Kill()
		cmd.Wait()

		b, err := boltstore.Open(dir)
		if err != nil {
			t.Fatalf("round %d: reopen after SIGKILL: %v", round, err)
		}
		a, _, _ := b.Get(context.Background(), "pair/a")
		c, _, _ := b.Get(context.Background(), "pair/b")
		b.Close()
		if string(a) != string(c) {
			t.Fatalf("round %d: pair/a=%q pair/b=%q: a transaction was half applied", round, a, c)
		}
		// Commit i was acknowledged before its byte was written, so at
		// least the first 1+round*20 commits (values 0 to round*20) are on disk.
		if n, err := strconv.Atoi(string(a)); err != nil || n < round*20 {
			t.Fatalf("round %d: pair/a=%q after %d acknowledged commits: a committed transaction was lost", round, a, 1+round*20)
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
	b, err := boltstore.Open(dir)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(2)
	}
	ctx := context.Background()
	for i := 0; ; i++ {
		v := []byte(strconv.Itoa(i))
		if _, err := b.Txn(ctx, store.Set("pair/a", store.AnyVersion, v), store.Set("pair/b", store.AnyVersion, v)); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(2)
		}
		os.Stdout.Write([]byte("w")) // committed
	}
}
