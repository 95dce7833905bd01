package certificate

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// clock is a settable clock for Options.Now.
type clock struct {
	mu sync.Mutex
	t  time.Time
}

func newClock() *clock { return &clock{t: time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	c.t = c.t.Add(d)
	c.mu.Unlock()
}

func (c *clock) Set(t time.Time) {
	c.mu.Lock()
	c.t = t
	c.mu.Unlock()
}

func testLogger(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(t.Output(), &slog.HandlerOptions{Level: slog.LevelWarn}))
}

func newTestManager(t *testing.T, st Store, opts Options) *Manager {
	t.Helper()
	m, err := New(t.Context(), testLogger(t), st, opts)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return m
}

// runManager runs m.Run until the test ends and waits for it to return.
// It returns once Run has taken over writing claims.
func runManager(t *testing.T, m *Manager) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	waitClaimWriter(t, m)
}

// waitClaimWriter waits until Run writes m's claims.
func waitClaimWriter(t *testing.T, m *Manager) {
	t.Helper()
	testwait.For(t, "Run to start writing claims", func() bool {
		m.claimMu.Lock()
		defer m.claimMu.Unlock()
		return m.claimWriters > 0
	})
}

func ecKey(t testing.TB, c elliptic.Curve) crypto.Signer {
	t.Helper()
	k, err := ecdsa.GenerateKey(c, rand.Reader)
	if err != nil {
		t.Fatalf("generate key: %v", err)
	}
	return k
}

// csrFor returns a DER CSR signed by key asking for tmpl's names.
func csrFor(t testing.TB, key crypto.Signer, tmpl *x509.CertificateRequest) []byte {
	t.Helper()
	if tmpl == nil {
		tmpl = &x509.CertificateRequest{Subject: pkix.Name{CommonName: "agent"}}
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, tmpl, key)
	if err != nil {
		t.Fatalf("create CSR: %v", err)
	}
	return der
}

// nextAnnouncement waits for the first announcement of kind, skipping
// others.
func nextAnnouncement(t *testing.T, ch <-chan Announcement, kind AnnouncementKind) Announcement {
	t.Helper()
	deadline := time.After(testwait.Bound(t))
	for {
		select {
		case a, ok := <-ch:
			if !ok {
				t.Fatalf("announcement channel closed while waiting for %s", kind)
			}
			if a.Kind == kind {
				return a
			}
		case <-deadline:
			t.Fatalf("no %s announcement", kind)
		}
	}
}

// drain returns the announcements queued on ch without waiting.
func drain(ch <-chan Announcement) []Announcement {
	var out []Announcement
	for {
		select {
		case a := <-ch:
			out = append(out, a)
		default:
			return out
		}
	}
}

// readCounter is a Store that counts the records under prefix it hands
// out with their values (by List or Get).
type readCounter struct {
	*store.Memory
	prefix string
	mu     sync.Mutex
	read   int
}

func (r *readCounter) count(n int) {
	r.mu.Lock()
	r.read += n
	r.mu.Unlock()
}

// reads returns the count so far and starts it again.
func (r *readCounter) reads() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := r.read
	r.read = 0
	return n
}

func (r *readCounter) List(ctx context.Context, prefix string) ([]store.KV, error) {
	kvs, err := r.Memory.List(ctx, prefix)
	if strings.HasPrefix(prefix, r.prefix) {
		r.count(len(kvs))
	}
	return kvs, err
}

func (r *readCounter) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	val, ver, err := r.Memory.Get(ctx, key)
	if strings.HasPrefix(key, r.prefix) && ver != 0 {
		r.count(1)
	}
	return val, ver, err
}

// runningWithProxy runs a manager over st, subscribed to its
// announcements (ch, ended with the test), with one proxy enrolled and its
// ProxyIssued read from ch.
func runningWithProxy(t *testing.T, st Store) (m *Manager, ch <-chan Announcement, peer *x509.Certificate, cn string) {
	t.Helper()
	m = newTestManager(t, st, Options{})
	runManager(t, m)
	ch, cancel := m.Subscribe()
	t.Cleanup(cancel)
	peer, cn = issueProxy(t, m)
	nextAnnouncement(t, ch, ProxyIssued)
	return m, ch, peer, cn
}
