package sessionticket

import (
	"bytes"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/json"
	"io"
	"log/slog"
	"math/big"
	"net"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/boltstore"
	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

// selfSigned returns a certificate for 127.0.0.1 signed by its own key.
func selfSigned(t *testing.T, cn string) tls.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(time.Hour),
		IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// tlsPair is a server certificate and a client that trusts it.
type tlsPair struct {
	server tls.Certificate
	roots  *x509.CertPool
	client tls.Certificate
}

func newPair(t *testing.T) tlsPair {
	p := tlsPair{server: selfSigned(t, "server"), client: selfSigned(t, "proxy-1"), roots: x509.NewCertPool()}
	leaf, err := x509.ParseCertificate(p.server.Certificate[0])
	if err != nil {
		t.Fatal(err)
	}
	p.roots.AddCert(leaf)
	return p
}

// serve runs a TLS 1.3 server with k's keys on a loopback port until the
// test ends: it requires a client certificate, as the xDS port does, and
// writes one byte on each connection. It returns the port's address and
// the CNs of the client certificates its handshakes saw, resumed or not.
func serve(t *testing.T, p tlsPair, k *Keeper) (string, func() []string) {
	t.Helper()
	return serveWith(t, p, k.Apply)
}

// serveWith is serve with the session tickets apply sets up.
func serveWith(t *testing.T, p tlsPair, apply func(*tls.Config)) (string, func() []string) {
	t.Helper()
	var (
		mu  sync.Mutex
		cns []string
	)
	cfg := &tls.Config{
		MinVersion:   tls.VersionTLS13,
		Certificates: []tls.Certificate{p.server},
		ClientAuth:   tls.RequireAnyClientCert,
		VerifyConnection: func(cs tls.ConnectionState) error {
			mu.Lock()
			defer mu.Unlock()
			if len(cs.PeerCertificates) > 0 {
				cns = append(cns, cs.PeerCertificates[0].Subject.CommonName)
			} else {
				cns = append(cns, "")
			}
			return nil
		},
	}
	apply(cfg)
	ln, err := tls.Listen("tcp", "127.0.0.1:0", cfg.Clone())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				if err := c.(*tls.Conn).Handshake(); err != nil {
					return
				}
				_, _ = c.Write([]byte{1})
				_, _ = io.Copy(io.Discard, c) // until the client closes
			}()
		}
	}()
	return ln.Addr().String(), func() []string {
		mu.Lock()
		defer mu.Unlock()
		return append([]string(nil), cns...)
	}
}

// connect makes one connection to addr with the client's session cache,
// reads the server's byte (which brings the session ticket in) and
// reports whether the handshake resumed a session.
func connect(t *testing.T, p tlsPair, addr string, cache tls.ClientSessionCache) bool {
	t.Helper()
	c, err := tls.Dial("tcp", addr, &tls.Config{
		MinVersion:         tls.VersionTLS13,
		RootCAs:            p.roots,
		ServerName:         "127.0.0.1",
		Certificates:       []tls.Certificate{p.client},
		ClientSessionCache: cache,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.ReadFull(c, make([]byte, 1)); err != nil {
		t.Fatal(err)
	}
	return c.ConnectionState().DidResume
}

func newKeeper(t *testing.T, st kv) *Keeper {
	t.Helper()
	k, err := New(discard(), st, 0)
	if err != nil {
		t.Fatal(err)
	}
	if err := k.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	return k
}

// A proxy resumes its session with a server started again on the same
// store (here a bbolt file closed and opened again), with its client
// certificate carried over; a server on another store makes it a full
// handshake.
func TestSessionResumesAfterARestart(t *testing.T) {
	dir := t.TempDir()
	p := newPair(t)
	cache := tls.NewLRUClientSessionCache(1)

	st, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	addr, _ := serve(t, p, newKeeper(t, st))
	if connect(t, p, addr, cache) {
		t.Fatal("the first connection resumed a session it cannot have had")
	}
	if !connect(t, p, addr, cache) {
		t.Fatal("the second connection to the same server did not resume")
	}
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st, err = boltstore.Open(dir) // the restart
	if err != nil {
		t.Fatal(err)
	}
	defer st.Close()
	addr, seen := serve(t, p, newKeeper(t, st))
	if !connect(t, p, addr, cache) {
		t.Fatal("the connection to the restarted server did not resume the session")
	}
	if got := seen(); len(got) != 1 || got[0] != "proxy-1" {
		t.Fatalf("the resumed handshake's client certificates = %q, want the proxy's (proxy-1)", got)
	}

	other, _ := serve(t, p, newKeeper(t, store.NewMemory()))
	if connect(t, p, other, cache) {
		t.Fatal("a server with other keys resumed the session")
	}
}

// Replicas on one store use the same keys, the one that loads first
// creating them; a rotation by one reaches the others through Run, and a
// ticket from before the rotation still resumes after it.
func TestReplicasShareAndRotateKeys(t *testing.T) {
	st := store.NewMemory()
	p := newPair(t)
	keepers := make([]*Keeper, 4)
	var wg sync.WaitGroup
	for i := range keepers {
		k, err := New(discard(), st, time.Hour)
		if err != nil {
			t.Fatal(err)
		}
		keepers[i] = k
		wg.Go(func() {
			if err := k.Load(context.Background()); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	newest := func(k *Keeper) []byte { return k.keys.Load().rec.Keys[0].Key }
	for i, k := range keepers[1:] {
		if !bytes.Equal(newest(k), newest(keepers[0])) || len(k.keys.Load().rec.Keys) != 1 {
			t.Fatalf("replica %d loaded other keys than replica 0", i+1)
		}
	}

	a, b := keepers[0], keepers[1]
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- a.Run(ctx) }()

	addrA, _ := serve(t, p, a)
	addrB, _ := serve(t, p, b)
	cache := tls.NewLRUClientSessionCache(1)
	connect(t, p, addrA, cache) // a ticket under the first key
	if !connect(t, p, addrB, cache) {
		t.Fatal("a ticket from replica a did not resume on replica b")
	}

	// b finds the key due and rotates it; a follows.
	first := newest(b)
	b.now = func() time.Time { return time.Now().Add(time.Hour + time.Minute) }
	if err := b.Load(context.Background()); err != nil {
		t.Fatal(err)
	}
	if bytes.Equal(newest(b), first) || len(b.keys.Load().rec.Keys) != 2 {
		t.Fatalf("b did not rotate: %d keys, newest the same: %t", len(b.keys.Load().rec.Keys), bytes.Equal(newest(b), first))
	}
	testwait.For(t, "replica a uses the key b rotated in", func() bool { return bytes.Equal(newest(a), newest(b)) })
	cancel()
	if err := <-done; err != nil {
		t.Fatalf("Run: %v", err)
	}

	cache = tls.NewLRUClientSessionCache(1)
	a.use(&record{Keys: []storedKey{{Key: first, Created: time.Now()}}}) // a ticket under the old key only
	connect(t, p, addrA, cache)
	a.use(b.keys.Load().rec)
	a.sessions.clear() // the ticket is decrypted, as by a replica or after a restart
	if !connect(t, p, addrA, cache) {
		t.Fatal("a ticket under the key before the rotation did not resume after it")
	}
}

// A rotation keeps each older key while a ticket it encrypted may still
// be used: ticketLifetime after the next key replaced it.
func TestRotationKeepsKeysForTheTicketLifetime(t *testing.T) {
	now := time.Date(2026, 11, 28, 12, 0, 0, 0, time.UTC)
	day := 24 * time.Hour
	var rec record
	for i := range 10 { // keys made daily, the newest a day old
		rec.Keys = append(rec.Keys, storedKey{Key: bytes.Repeat([]byte{byte(i)}, keySize), Created: now.Add(-time.Duration(i+1) * day)})
	}
	next, err := rotate(rec, now, day)
	if err != nil {
		t.Fatal(err)
	}
	// The old newest stops now; key i stopped when key i-1 was made, i
	// days ago, and is kept while that is at most seven days ago.
	if len(next.Keys) != 1+8 {
		t.Fatalf("after the rotation %d keys, want the new one and 8", len(next.Keys))
	}
	if !next.Keys[0].Created.Equal(now) || bytes.Equal(next.Keys[0].Key, rec.Keys[0].Key) {
		t.Fatal("the new key is not first")
	}
	if last := next.Keys[len(next.Keys)-1]; !last.Created.Equal(now.Add(-8 * day)) {
		t.Fatalf("the oldest key kept was made %v, want %v", last.Created, now.Add(-8*day))
	}
	if err := decode(mustJSON(t, next), &record{}); err != nil {
		t.Fatalf("a rotated record does not decode: %v", err)
	}
}

func mustJSON(t *testing.T, v any) []byte {
	t.Helper()
	b, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// Keys the store holds in an unreadable form are replaced, with a warning
// that names the store key, and serving goes on.
func TestUnreadableKeysAreReplaced(t *testing.T) {
	for name, raw := range map[string][]byte{
		"not JSON":    []byte("{"),
		"no keys":     []byte(`{"keys":[]}`),
		"short key":   []byte(`{"keys":[{"key":"AAAA","created":"2026-11-28T00:00:00Z"}]}`),
		"wrong order": mustJSON(t, record{Keys: []storedKey{{Key: make([]byte, keySize), Created: time.Unix(1, 0)}, {Key: make([]byte, keySize), Created: time.Unix(2, 0)}}}),
	} {
		t.Run(name, func(t *testing.T) {
			ctx := context.Background()
			st := store.NewMemory()
			if _, _, err := st.CompareAndSwap(ctx, Key, 0, raw); err != nil {
				t.Fatal(err)
			}
			var logs testlog.Buffer
			k, err := New(logs.Logger(), st, 0)
			if err != nil {
				t.Fatal(err)
			}
			if err := k.Load(ctx); err != nil {
				t.Fatalf("Load: %v", err)
			}
			if !strings.Contains(logs.String(), "do not decode") || !strings.Contains(logs.String(), Key) {
				t.Fatalf("no warning naming %s: %s", Key, logs.String())
			}
			stored, _, err := st.Get(ctx, Key)
			if err != nil {
				t.Fatal(err)
			}
			var rec record
			if err := decode(stored, &rec); err != nil || !bytes.Equal(rec.Keys[0].Key, k.keys.Load().rec.Keys[0].Key) {
				t.Fatalf("the store holds %s after Load (%v), not the keys in use", stored, err)
			}
		})
	}
}

// A store that fails leaves the keys in use, and Load says which key it
// could not read.
func TestStoreErrorsKeepTheKeys(t *testing.T) {
	k, err := New(discard(), failing{}, 0)
	if err != nil {
		t.Fatal(err)
	}
	before := k.keys.Load()
	err = k.Load(context.Background())
	if err == nil || !strings.Contains(err.Error(), Key) {
		t.Fatalf("Load on a failing store: %v, want an error naming %s", err, Key)
	}
	if k.keys.Load() != before {
		t.Fatal("a failed Load changed the keys in use")
	}
}

type failing struct{}

func (failing) Get(context.Context, string) ([]byte, uint64, error) {
	return nil, 0, io.ErrUnexpectedEOF
}

func (failing) CompareAndSwap(context.Context, string, uint64, []byte) (uint64, bool, error) {
	return 0, false, io.ErrUnexpectedEOF
}

func (failing) Watch(ctx context.Context, _ string) <-chan struct{} { return make(chan struct{}) }
