//go:build dnsintegration

package dnspublish

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/dnspublish/bindtest"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// These tests run a real BIND 9 (see bindtest) as the zone's primary, with
// a TSIG key. `make test` installs bind9 and dnsutils and runs them with
// -tags dnsintegration.

const testZone = "example.test"

// fakeSource is a Source the test sets.
type fakeSource struct {
	mu    sync.Mutex
	names map[string][]netip.Addr
	ch    chan struct{}
}

func newFakeSource() *fakeSource {
	return &fakeSource{names: map[string][]netip.Addr{}, ch: make(chan struct{}, 1)}
}

func (f *fakeSource) set(name string, addrs ...string) {
	f.mu.Lock()
	if len(addrs) == 0 {
		delete(f.names, name)
	} else {
		f.names[name] = nil
		for _, a := range addrs {
			f.names[name] = append(f.names[name], netip.MustParseAddr(a))
		}
	}
	f.mu.Unlock()
	select {
	case f.ch <- struct{}{}:
	default:
	}
}

func (f *fakeSource) Names() map[string][]netip.Addr {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := map[string][]netip.Addr{}
	for k, v := range f.names {
		out[k] = slices.Clone(v)
	}
	return out
}

func (f *fakeSource) Subscribe() (<-chan struct{}, func()) { return f.ch, func() {} }

func startPublisher(t *testing.T, addr, secret, owner string, src Source) *Publisher {
	t.Helper()
	prov, err := NewRFC2136(RFC2136Config{Zone: testZone, Server: addr, TSIGKeyName: "osm-vm", TSIGAlgorithm: "hmac-sha256", TSIGSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	if testing.Verbose() {
		log = slog.New(slog.NewTextHandler(os.Stderr, nil))
	}
	p, err := New(log, "rfc2136", prov, src, Options{Owner: owner, TTL: 30 * time.Second, MinBackoff: 20 * time.Millisecond, MaxBackoff: 200 * time.Millisecond, Resync: 200 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	return p
}

func TestBINDRecordsFollowTheSource(t *testing.T) {
	secret := bindtest.NewSecret(t)
	b := bindtest.Start(t, testZone, secret,
		"www\tIN A 192.0.2.80",   // someone else's, not wanted by the source
		"taken\tIN A 192.0.2.81", // someone else's, wanted by the source
		`theirs	IN A 192.0.2.82`, // another osm-vm's
		`theirs	IN TXT "heritage=osm-vm,osm-vm/owner=other"`,
	)
	src := newFakeSource()
	src.set("shop."+testZone, "10.0.0.1", "10.0.0.2", "2001:db8::1")
	src.set("taken."+testZone, "10.0.0.3")
	src.set("theirs."+testZone, "10.0.0.4")
	src.set("outside.example.org", "10.0.0.5")
	p := startPublisher(t, b.Addr, secret, "mesh-a", src)

	testwait.Until(t, "shop's A records", b.DigIs("shop."+testZone, "A", "10.0.0.1", "10.0.0.2"))
	testwait.Until(t, "shop's AAAA record", b.DigIs("shop."+testZone, "AAAA", "2001:db8::1"))
	testwait.Until(t, "shop's ownership record", b.DigIs("shop."+testZone, "TXT", `"heritage=osm-vm,osm-vm/owner=mesh-a"`))
	testwait.Until(t, "status lists the conflicts", func() (bool, string) {
		s := p.Status()
		return s.Healthy && len(s.Conflicts) == 3 && slices.Equal(s.Owned, []string{"shop." + testZone}), fmt.Sprintf("%+v", s)
	})
	// Names held by others are left alone.
	for _, c := range []struct{ name, typ, want string }{
		{"www." + testZone, "A", "192.0.2.80"},
		{"taken." + testZone, "A", "192.0.2.81"},
		{"theirs." + testZone, "A", "192.0.2.82"},
		{"theirs." + testZone, "TXT", `"heritage=osm-vm,osm-vm/owner=other"`},
	} {
		if got := b.Dig(c.name, c.typ); !slices.Equal(got, []string{c.want}) {
			t.Errorf("dig %s %s = %q, want %q (untouched)", c.name, c.typ, got, c.want)
		}
	}

	// The addresses move.
	src.set("shop."+testZone, "10.0.0.9")
	testwait.Until(t, "shop's A record moved", b.DigIs("shop."+testZone, "A", "10.0.0.9"))
	testwait.Until(t, "shop's AAAA record gone", b.DigIs("shop."+testZone, "AAAA"))

	// A second name, then the first one removed.
	src.set("api."+testZone, "10.0.1.1")
	testwait.Until(t, "api's A record", b.DigIs("api."+testZone, "A", "10.0.1.1"))
	src.set("shop." + testZone)
	testwait.Until(t, "shop's A record removed", b.DigIs("shop."+testZone, "A"))
	testwait.Until(t, "shop's ownership record removed", b.DigIs("shop."+testZone, "TXT"))
	if got := b.Dig("api."+testZone, "A"); !slices.Equal(got, []string{"10.0.1.1"}) {
		t.Errorf("api after shop's removal = %q, want 10.0.1.1", got)
	}
	if got := b.Dig("www."+testZone, "A"); !slices.Equal(got, []string{"192.0.2.80"}) {
		t.Errorf("www after every change = %q, want 192.0.2.80 (untouched)", got)
	}

	// A record changed behind the publisher's back is put right.
	b.NSUpdate(secret, fmt.Sprintf("update delete api.%s A\nupdate add api.%s 30 A 10.9.9.9\n", testZone, testZone))
	testwait.Until(t, "api's A record restored by the resync", b.DigIs("api."+testZone, "A", "10.0.1.1"))
}

func TestBINDWrongKeyMakesThePublisherUnhealthyUntilFixed(t *testing.T) {
	good := bindtest.NewSecret(t)
	b := bindtest.Start(t, testZone, bindtest.NewSecret(t)) // the server knows another secret
	src := newFakeSource()
	src.set("shop."+testZone, "10.0.0.1")
	p := startPublisher(t, b.Addr, good, "mesh-a", src)

	testwait.Until(t, "unhealthy with the TSIG cause", func() (bool, string) {
		s := p.Status()
		return !s.Healthy && strings.Contains(s.Error, "TSIG"), fmt.Sprintf("%+v", s)
	})
	if got := b.Dig("shop."+testZone, "A"); len(got) != 0 {
		t.Fatalf("shop published with a wrong key: %q", got)
	}

	b.Restart(good) // the operator fixes the server's key
	testwait.Until(t, "healthy again", func() (bool, string) {
		s := p.Status()
		return s.Healthy, fmt.Sprintf("%+v", s)
	})
	testwait.Until(t, "shop published after the fix", b.DigIs("shop."+testZone, "A", "10.0.0.1"))
}

func TestBINDRefusedUpdateIsUnhealthy(t *testing.T) {
	secret := bindtest.NewSecret(t)
	b := bindtest.Start(t, testZone, secret)
	b.AllowUpdate = "none;" // the key may read the zone but not change it
	b.Restart(secret)
	src := newFakeSource()
	src.set("shop."+testZone, "10.0.0.1")
	p := startPublisher(t, b.Addr, secret, "mesh-a", src)
	testwait.Until(t, "unhealthy with REFUSED", func() (bool, string) {
		s := p.Status()
		return !s.Healthy && strings.Contains(s.Error, "REFUSED") && strings.Contains(s.Error, "allow-update"), fmt.Sprintf("%+v", s)
	})
}

func TestBINDUnreachableServerIsUnhealthy(t *testing.T) {
	addr := bindtest.FreeAddr(t) // nothing listens there
	src := newFakeSource()
	src.set("shop."+testZone, "10.0.0.1")
	p := startPublisher(t, addr, bindtest.NewSecret(t), "mesh-a", src)
	testwait.Until(t, "unhealthy naming the server", func() (bool, string) {
		s := p.Status()
		return !s.Healthy && strings.Contains(s.Error, addr), fmt.Sprintf("%+v", s)
	})
}
