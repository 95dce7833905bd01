package sessionticket

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/json"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/store"
)

// A proxy reconnecting to the process that made its ticket resumes from
// the session the process kept, with its client certificate, and gets a
// new ticket for the next time; the one it used is forgotten.
func TestResumptionFindsTheProcessSession(t *testing.T) {
	p := newPair(t)
	k := newKeeper(t, store.NewMemory())
	addr, seen := serve(t, p, k)
	cache := tls.NewLRUClientSessionCache(1)
	if connect(t, p, addr, cache) {
		t.Fatal("the first connection resumed a session it cannot have had")
	}
	// Each handshake makes one ticket (the server sends it before its
	// byte, which connect reads); a resumption from the kept session
	// takes the one it used, so one stays kept whatever the number of
	// reconnections. A resumption that decrypted would leave its ticket's
	// session kept: two after the first reconnection.
	for i := range 2 {
		if !connect(t, p, addr, cache) {
			t.Fatalf("reconnection %d did not resume", i+1)
		}
		if n := k.sessions.len(); n != 1 {
			t.Fatalf("after reconnection %d, %d sessions kept, want the last ticket's only (the used one taken)", i+1, n)
		}
	}
	if got := seen(); len(got) != 3 || got[1] != "proxy-1" || got[2] != "proxy-1" {
		t.Fatalf("the handshakes' client certificates = %q, want the proxy's three times", got)
	}
}

// rewriting is a client session cache whose tickets are changed by edit
// when the client uses them.
type rewriting struct {
	tls.ClientSessionCache
	edit func(ticket []byte) []byte
}

func (r rewriting) Get(key string) (*tls.ClientSessionState, bool) {
	cs, ok := r.ClientSessionCache.Get(key)
	if !ok || cs == nil {
		return cs, ok
	}
	ticket, state, err := cs.ResumptionState()
	if err != nil || ticket == nil {
		return cs, ok
	}
	edited, err := tls.NewResumptionState(r.edit(bytes.Clone(ticket)), state)
	if err != nil {
		return nil, false
	}
	return edited, true
}

// A ticket whose session the process does not hold (its id unknown here,
// as a replica's or a restarted server's tickets are) is decrypted, and so
// is a ticket of crypto/tls's own format, which an osm-server before the
// kept sessions made.
func TestTicketsAreDecryptedWhenNoSessionIsKept(t *testing.T) {
	p := newPair(t)
	st := store.NewMemory()
	k := newKeeper(t, st)
	addr, _ := serve(t, p, k)

	otherID := rewriting{ClientSessionCache: tls.NewLRUClientSessionCache(1), edit: func(tk []byte) []byte {
		if !bytes.HasPrefix(tk, ticketMagic) {
			t.Errorf("the server's ticket does not start with %q", ticketMagic)
			return tk
		}
		tk[len(ticketMagic)] ^= 0xff // another id, the same encrypted state
		return tk
	}}
	connect(t, p, addr, otherID)
	if !connect(t, p, addr, otherID) {
		t.Fatal("a ticket whose id the server does not know did not resume")
	}
	// Decrypted: the first ticket's session is still kept beside the new one.
	if n := k.sessions.len(); n != 2 {
		t.Fatalf("%d sessions kept, want 2: the first ticket's (its id was not the one used) and the new one's", n)
	}

	// An older osm-server: crypto/tls's tickets, under the same keys.
	var keys [][keySize]byte
	for _, sk := range k.keys.Load().rec.Keys {
		keys = append(keys, [keySize]byte(sk.Key))
	}
	oldAddr, _ := serveWith(t, p, func(cfg *tls.Config) { cfg.SetSessionTicketKeys(keys) })
	cache := tls.NewLRUClientSessionCache(1)
	connect(t, p, oldAddr, cache)
	if !connect(t, p, addr, cache) {
		t.Fatal("a ticket in crypto/tls's own format did not resume")
	}
}

// When the stored keys are replaced (not rotated: the key the process's
// tickets were made with is gone), the sessions kept for those tickets go
// too: the proxy makes a full handshake, as a ticket no key decrypts does.
func TestReplacedKeysEndTheKeptSessions(t *testing.T) {
	p := newPair(t)
	st := store.NewMemory()
	k := newKeeper(t, st)
	addr, _ := serve(t, p, k)
	cache := tls.NewLRUClientSessionCache(1)
	connect(t, p, addr, cache)

	_, ver, err := st.Get(context.Background(), Key)
	if err != nil {
		t.Fatal(err)
	}
	fresh, err := newKey(time.Now())
	if err != nil {
		t.Fatal(err)
	}
	raw, err := json.Marshal(record{Keys: []storedKey{fresh}})
	if err != nil {
		t.Fatal(err)
	}
	if _, ok, err := st.CompareAndSwap(context.Background(), Key, ver, raw); err != nil || !ok {
		t.Fatalf("replace the stored keys: ok %t, %v", ok, err)
	}
	if err := k.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if n := k.sessions.len(); n != 0 {
		t.Fatalf("%d sessions kept under keys no longer kept", n)
	}
	if connect(t, p, addr, cache) {
		t.Fatal("a ticket made under replaced keys resumed")
	}
}

// The sessions kept are bounded: past maxSessions one goes for each new.
func TestKeptSessionsAreBounded(t *testing.T) {
	var s sessions
	for i := range maxSessions + 10 {
		var id [ticketIDSize]byte
		id[0], id[1], id[2] = byte(i), byte(i>>8), byte(i>>16)
		s.put(id, &tls.SessionState{})
	}
	if n := s.len(); n != maxSessions {
		t.Fatalf("%d sessions kept, want the bound, %d", n, maxSessions)
	}
}
