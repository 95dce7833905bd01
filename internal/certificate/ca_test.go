package certificate

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/sha256"
	"encoding/hex"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/boltstore"
)

func TestRootCreatedOnceAndKeptAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	st, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	m := newTestManager(t, st, Options{})
	root := m.RootPEM()
	svc, err := m.ServiceCertificate(t.Context(), bookstore)
	if err != nil {
		t.Fatal(err)
	}
	again := newTestManager(t, st, Options{})
	if !bytes.Equal(again.RootPEM(), root) {
		t.Errorf("second manager on the same store has another root")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	restarted := newTestManager(t, st, Options{})
	if !bytes.Equal(restarted.RootPEM(), root) {
		t.Errorf("root changed across a restart")
	}
	if c, err := restarted.ServiceCertificate(t.Context(), bookstore); err != nil || c.GetSerialNumber() != svc.GetSerialNumber() {
		t.Errorf("after a restart ServiceCertificate = %v, %v; want the stored certificate %s", c, err, svc.GetSerialNumber())
	}

	c := restarted.root.X509()
	if !c.IsCA || c.MaxPathLen != 0 || !c.MaxPathLenZero {
		t.Errorf("root IsCA=%v MaxPathLen=%d MaxPathLenZero=%v, want a CA that signs only leaves", c.IsCA, c.MaxPathLen, c.MaxPathLenZero)
	}
	pub, ok := c.PublicKey.(*ecdsa.PublicKey)
	if !ok || pub.Curve != elliptic.P256() {
		t.Errorf("root key is %T, want ECDSA P-256", c.PublicKey)
	}
	if got, want := c.URIs[0].String(), "spiffe://osm.local"; got != want {
		t.Errorf("root URI SAN = %q, want %q", got, want)
	}
	if k := restarted.root.GetPrivateKey(); len(k) != 0 {
		t.Errorf("the root Certificate holds the CA key")
	}
}

// gateStore makes every caller's first Get of the CA wait until n callers
// have made it, so all of them see an empty store and race to create the
// root.
type gateStore struct {
	*store.Memory
	wg        sync.WaitGroup
	seen      sync.Map
	caWritten atomic.Int32 // transactions that wrote the CA
}

func (g *gateStore) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	ok, err := g.Memory.Txn(ctx, ops...)
	if ok && err == nil && slices.ContainsFunc(ops, func(op store.Op) bool { return op.Key == caKey && op.Kind != store.OpCheck }) {
		g.caWritten.Add(1)
	}
	return ok, err
}

func (g *gateStore) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	v, ver, err := g.Memory.Get(ctx, key)
	if key == caKey {
		if _, loaded := g.seen.LoadOrStore(ctx, true); !loaded {
			g.wg.Done()
			g.wg.Wait()
		}
	}
	return v, ver, err
}

func TestRootCreationRace(t *testing.T) {
	const replicas = 4
	g := &gateStore{Memory: store.NewMemory()}
	g.wg.Add(replicas)
	roots := make([][]byte, replicas)
	var wg sync.WaitGroup
	for i := range replicas {
		wg.Go(func() {
			// Each replica its own ctx, so the gate counts them apart.
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			m, err := New(ctx, testLogger(t), g, Options{})
			if err != nil {
				t.Errorf("replica %d: New: %v", i, err)
				return
			}
			roots[i] = m.RootPEM()
		})
	}
	wg.Wait()
	for i := 1; i < replicas; i++ {
		if !bytes.Equal(roots[i], roots[0]) {
			t.Errorf("replica %d has another root than replica 0", i)
		}
	}
	// Versions are the store's to choose (Consul's are Raft indexes): count
	// the writes instead.
	if n := g.caWritten.Load(); n != 1 {
		t.Errorf("the CA record was written %d times, want once", n)
	}
}

func TestTrustDomain(t *testing.T) {
	st := store.NewMemory()
	m := newTestManager(t, st, Options{TrustDomain: "example.org"})
	if got, want := m.root.GetURISANs(), "spiffe://example.org"; len(got) != 1 || got[0] != want {
		t.Errorf("root URI SANs = %q, want [%q]", got, want)
	}
	_, err := New(t.Context(), testLogger(t), st, Options{TrustDomain: "osm.local"})
	if err == nil || !strings.Contains(err.Error(), `trust domain "example.org"`) {
		t.Errorf("New with another trust domain: err = %v, want one naming the stored trust domain", err)
	}
	for _, bad := range []string{"Upper.Case", "has space", "-dash", "a/b"} {
		if _, err := New(t.Context(), testLogger(t), store.NewMemory(), Options{TrustDomain: bad}); err == nil {
			t.Errorf("New(TrustDomain %q) succeeded; want an error", bad)
		}
	}
}

func TestCAHash(t *testing.T) {
	m := newTestManager(t, store.NewMemory(), Options{})
	root := m.root.X509()
	sum := sha256.Sum256(root.RawSubjectPublicKeyInfo)
	want := "sha256:" + hex.EncodeToString(sum[:])
	if got := CAHash(root.Raw); got != want {
		t.Errorf("CAHash = %q, want %q", got, want)
	}
	if got := m.CAHash(); got != want {
		t.Errorf("Manager.CAHash = %q, want %q", got, want)
	}
	if got := CAHash([]byte("not a certificate")); got != "" {
		t.Errorf("CAHash(garbage) = %q, want \"\"", got)
	}
	other := newTestManager(t, store.NewMemory(), Options{})
	if other.CAHash() == m.CAHash() {
		t.Errorf("two meshes have the same CA hash")
	}
}
