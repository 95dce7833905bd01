package certificate

import (
	"context"
	"errors"
	"sync"
	"testing"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// The manager's own commits (claims, enrollments, service certificates)
// do not wake its Run to list the records again: it read each back as it
// made it. A watch with the manager's view of the store, registered before
// the commits, is not signalled by them (Memory signals in the commit
// itself, so nothing is waited for); a commit of another writer is still
// followed and announced.
func TestOwnCommitsDoNotWakeTheListing(t *testing.T) {
	st := store.NewMemory()
	m := newTestManager(t, st, Options{})
	runManager(t, m)
	ch, cancel := m.Subscribe()
	defer cancel()
	ctx, stop := context.WithCancel(t.Context())
	defer stop()
	proxies := m.st.Watch(ctx, proxyPrefix)
	services := m.st.Watch(ctx, servicePrefix)

	var cns []string
	for range 5 {
		_, cn := issueProxy(t, m)
		cns = append(cns, cn)
		nextAnnouncement(t, ch, ProxyIssued)
	}
	for _, cn := range cns {
		if err := m.ClaimProxy(ctx, cn); err != nil {
			t.Fatal(err)
		}
	}
	for range cns {
		nextAnnouncement(t, ch, ProxyClaimed)
	}
	// An account none of the proxies has (theirs was issued when they
	// enrolled).
	buyer := mesh.ServiceAccount{Namespace: "default", Name: "bookbuyer"}
	if _, err := m.RequestServiceCertificate(ctx, buyer); !errors.Is(err, ErrPending) {
		t.Fatalf("RequestServiceCertificate: %v, want ErrPending while Run issues it", err)
	}
	for a := nextAnnouncement(t, ch, Issued); a.ServiceAccount != buyer; a = nextAnnouncement(t, ch, Issued) {
	}
	select {
	case <-proxies:
		t.Error("the manager's own enrollments and claims signalled its watch of the proxy records")
	default:
	}
	select {
	case <-services:
		t.Error("the manager's own service certificate signalled its watch of the service records")
	default:
	}

	// Another replica's revocation is still followed.
	other := newTestManager(t, st, Options{})
	if err := other.RevokeProxy(ctx, cns[0]); err != nil {
		t.Fatal(err)
	}
	if a := nextAnnouncement(t, ch, ProxyRevoked); a.ProxyCN != cns[0] {
		t.Errorf("ProxyRevoked = %+v, want %s", a, cns[0])
	}
}

// readBackFailer is a Memory store where the first Get of a key after a
// commit that wrote it fails, once armed: the manager's read-back of its
// own commit.
type readBackFailer struct {
	*store.Memory
	mu    sync.Mutex
	armed string // the key whose read-back is to fail
	fail  string // the key whose next Get fails
}

func (r *readBackFailer) arm(key string) {
	r.mu.Lock()
	r.armed = key
	r.mu.Unlock()
}

func (r *readBackFailer) Txn(ctx context.Context, ops ...store.Op) (bool, error) {
	ok, err := r.Memory.Txn(ctx, ops...)
	r.mu.Lock()
	for _, op := range ops {
		if ok && op.Key == r.armed {
			r.fail, r.armed = r.armed, ""
		}
	}
	r.mu.Unlock()
	return ok, err
}

func (r *readBackFailer) Get(ctx context.Context, key string) ([]byte, uint64, error) {
	r.mu.Lock()
	fail := r.fail == key
	if fail {
		r.fail = ""
	}
	r.mu.Unlock()
	if fail {
		return nil, 0, errors.New("injected read failure")
	}
	return r.Memory.Get(ctx, key)
}

// When the manager cannot read back its own commit, Run lists the records
// as it would after another writer's commit, and announces what it missed.
func TestFailedReadBackIsFollowedByAListing(t *testing.T) {
	st := &readBackFailer{Memory: store.NewMemory()}
	m, ch, _, cn := runningWithProxy(t, st)
	rec, err := m.Proxy(t.Context(), cn)
	if err != nil {
		t.Fatal(err)
	}
	st.arm(proxyKey(cn))
	if err := m.ClaimVerifiedProxy(t.Context(), rec); err != nil {
		t.Fatal(err)
	}
	if a := nextAnnouncement(t, ch, ProxyClaimed); a.ProxyCN != cn {
		t.Errorf("ProxyClaimed = %+v, want %s", a, cn)
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.armed != "" {
		t.Error("the claim's commit was never made")
	}
}
