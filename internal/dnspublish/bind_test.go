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

	"github.com/prometheus/client_golang/prometheus/testutil"

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
	testwait.Until(t, "shop's ownership record", b.DigIs("_osm-vm-owner.shop."+testZone, "TXT", `"heritage=osm-vm,osm-vm/owner=mesh-a"`))
	if got := b.Dig("shop."+testZone, "TXT"); len(got) != 0 {
		t.Errorf("shop's own TXT records = %q, want none (the ownership record has its own name)", got)
	}
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
	testwait.Until(t, "shop's ownership record removed", b.DigIs("_osm-vm-owner.shop."+testZone, "TXT"))
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

// TestBINDForeignTXTRecordsAtAPublishedName: a published name that also
// holds someone else's TXT records (an SPF record, a domain-verification
// token) is claimed, updated and deleted, and those records are never
// touched.
func TestBINDForeignTXTRecordsAtAPublishedName(t *testing.T) {
	secret := bindtest.NewSecret(t)
	b := bindtest.Start(t, testZone, secret,
		`shop	IN TXT "v=spf1 -all"`,
		`shop	IN TXT "google-site-verification=abc123"`,
	)
	foreign := []string{`"google-site-verification=abc123"`, `"v=spf1 -all"`}
	src := newFakeSource()
	src.set("shop."+testZone, "10.0.0.1")
	p := startPublisher(t, b.Addr, secret, "mesh-a", src)

	testwait.Until(t, "shop claimed", b.DigIs("shop."+testZone, "A", "10.0.0.1"))
	testwait.Until(t, "healthy, owning shop", func() (bool, string) {
		s := p.Status()
		return s.Healthy && slices.Equal(s.Owned, []string{"shop." + testZone}), fmt.Sprintf("%+v", s)
	})

	// The addresses move: the update's ownership prerequisite must hold
	// beside the foreign TXT records.
	src.set("shop."+testZone, "10.0.0.2", "2001:db8::2")
	testwait.Until(t, "shop's A record moved", b.DigIs("shop."+testZone, "A", "10.0.0.2"))
	testwait.Until(t, "shop's AAAA record", b.DigIs("shop."+testZone, "AAAA", "2001:db8::2"))
	testwait.Until(t, "the ownership record under its own name", b.DigIs("_osm-vm-owner.shop."+testZone, "TXT", `"heritage=osm-vm,osm-vm/owner=mesh-a"`))
	if got := b.Dig("shop."+testZone, "TXT"); !slices.Equal(got, foreign) {
		t.Errorf("shop's TXT records after the update = %q, want only the foreign ones %q", got, foreign)
	}
	if s := p.Status(); !s.Healthy || len(s.Failed) != 0 {
		t.Errorf("status after the update = %+v, want healthy with nothing failed", s)
	}

	// The name goes: the publisher's records go, the foreign ones stay.
	src.set("shop." + testZone)
	testwait.Until(t, "shop's A record removed", b.DigIs("shop."+testZone, "A"))
	testwait.Until(t, "shop's AAAA record removed", b.DigIs("shop."+testZone, "AAAA"))
	testwait.Until(t, "the ownership record removed", b.DigIs("_osm-vm-owner.shop."+testZone, "TXT"))
	if got := b.Dig("shop."+testZone, "TXT"); !slices.Equal(got, foreign) {
		t.Errorf("shop's TXT records after the deletion = %q, want the foreign ones %q untouched", got, foreign)
	}
	testwait.Until(t, "healthy, owning nothing", func() (bool, string) {
		s := p.Status()
		return s.Healthy && len(s.Owned) == 0 && len(s.Failed) == 0, fmt.Sprintf("%+v", s)
	})
	if n := testutil.ToFloat64(p.metrics.changeFailures); n != 0 {
		t.Errorf("osm_dns_publisher_change_failures_total = %v, want 0", n)
	}
}

// TestBINDAdoptsInNameOwnershipRecords: names a mesh published with the
// older in-name ownership record (the value among the name's own TXT
// records, where an update's prerequisite also had to match any foreign
// TXT record) are adopted: the record moves to its own name in one
// update, the foreign records stay, and later updates and deletions work.
func TestBINDAdoptsInNameOwnershipRecords(t *testing.T) {
	secret := bindtest.NewSecret(t)
	mine := `"heritage=osm-vm,osm-vm/owner=mesh-a"`
	dkim := `"v=DKIM1; k=rsa; " "p=MIGfMA0GCSqGSIb3DQEBAQUAA4GNADCBiQKBgQC"` // two character-strings
	b := bindtest.Start(t, testZone, secret,
		"old\tIN A 10.0.0.1", "old\tIN TXT "+mine, `old	IN TXT "v=spf1 -all"`, "old\tIN TXT "+dkim,
		"plain\tIN A 10.0.0.3", "plain\tIN TXT "+mine,
		"gone\tIN A 10.0.0.4", "gone\tIN TXT "+mine, `gone	IN TXT "v=spf1 -all"`,
		"theirs\tIN A 192.0.2.82", `theirs	IN TXT "heritage=osm-vm,osm-vm/owner=other"`,
	)
	src := newFakeSource()
	src.set("old."+testZone, "10.0.0.2")
	src.set("plain."+testZone, "10.0.0.3") // as published: adopted all the same
	src.set("theirs."+testZone, "10.0.0.9")
	p := startPublisher(t, b.Addr, secret, "mesh-a", src)

	testwait.Until(t, "old's A record moved", b.DigIs("old."+testZone, "A", "10.0.0.2"))
	for _, n := range []string{"old", "plain"} {
		testwait.Until(t, n+"'s ownership record under its own name", b.DigIs("_osm-vm-owner."+n+"."+testZone, "TXT", mine))
	}
	testwait.Until(t, "old's in-name record gone, the foreign ones kept", b.DigIs("old."+testZone, "TXT", `"v=spf1 -all"`, dkim))
	testwait.Until(t, "plain's in-name record gone", b.DigIs("plain."+testZone, "TXT"))
	testwait.Until(t, "gone's records deleted", b.DigIs("gone."+testZone, "A"))
	testwait.Until(t, "gone's foreign TXT kept", b.DigIs("gone."+testZone, "TXT", `"v=spf1 -all"`))
	testwait.Until(t, "healthy, owning old and plain, theirs in conflict", func() (bool, string) {
		s := p.Status()
		return s.Healthy && slices.Equal(s.Owned, []string{"old." + testZone, "plain." + testZone}) && len(s.Conflicts) == 1 && len(s.Failed) == 0, fmt.Sprintf("%+v", s)
	})
	if got := b.Dig("plain."+testZone, "A"); !slices.Equal(got, []string{"10.0.0.3"}) {
		t.Errorf("plain's A record = %q, want 10.0.0.3 kept", got)
	}
	for _, c := range []struct{ name, typ, want string }{
		{"theirs." + testZone, "A", "192.0.2.82"},
		{"theirs." + testZone, "TXT", `"heritage=osm-vm,osm-vm/owner=other"`},
	} {
		if got := b.Dig(c.name, c.typ); !slices.Equal(got, []string{c.want}) {
			t.Errorf("dig %s %s = %q, want %q (untouched)", c.name, c.typ, got, c.want)
		}
	}

	// Adopted names change and go like any other.
	src.set("old."+testZone, "10.0.0.5")
	testwait.Until(t, "old's A record moved again", b.DigIs("old."+testZone, "A", "10.0.0.5"))
	src.set("old." + testZone)
	testwait.Until(t, "old's A record removed", b.DigIs("old."+testZone, "A"))
	testwait.Until(t, "old's ownership record removed", b.DigIs("_osm-vm-owner.old."+testZone, "TXT"))
	if got, want := b.Dig("old."+testZone, "TXT"), []string{dkim, `"v=spf1 -all"`}; !slices.Equal(got, want) {
		t.Errorf("old's TXT records after the deletion = %q, want the foreign ones %q", got, want)
	}
	if n := testutil.ToFloat64(p.metrics.changeFailures); n != 0 {
		t.Errorf("osm_dns_publisher_change_failures_total = %v, want 0", n)
	}
}

// takenAfterRead is the real RFC2136 provider with someone else's update
// made right after each read of the zone: the publisher's change then
// meets a zone that is no longer as it read it.
type takenAfterRead struct {
	*RFC2136
	after func()
}

func (p takenAfterRead) Records(ctx context.Context) ([]RecordSet, error) {
	sets, err := p.RFC2136.Records(ctx)
	p.after()
	return sets, err
}

// TestBINDFailedChangeIsUnhealthy: an update whose ownership prerequisite
// fails (another mesh took the name between the read and the write) is
// not made, shows in the status as unhealthy with the name and the cause,
// and is counted; the next pass reads the name as someone else's.
func TestBINDFailedChangeIsUnhealthy(t *testing.T) {
	secret := bindtest.NewSecret(t)
	b := bindtest.Start(t, testZone, secret,
		"shop\tIN A 10.0.0.1", `shop	IN TXT "v=spf1 -all"`,
		`_osm-vm-owner.shop	IN TXT "heritage=osm-vm,osm-vm/owner=mesh-a"`,
	)
	rfc, err := NewRFC2136(RFC2136Config{Zone: testZone, Server: b.Addr, TSIGKeyName: "osm-vm", TSIGAlgorithm: "hmac-sha256", TSIGSecret: secret})
	if err != nil {
		t.Fatal(err)
	}
	var once sync.Once
	prov := takenAfterRead{rfc, func() {
		once.Do(func() {
			b.NSUpdate(secret, fmt.Sprintf("update delete _osm-vm-owner.shop.%s TXT\nupdate add _osm-vm-owner.shop.%s 30 TXT \"heritage=osm-vm,osm-vm/owner=other\"\n", testZone, testZone))
		})
	}}
	src := newFakeSource()
	src.set("shop."+testZone, "10.0.0.2")
	p, err := New(slog.New(slog.NewTextHandler(io.Discard, nil)), "rfc2136", prov, src, Options{Owner: "mesh-a"})
	if err != nil {
		t.Fatal(err)
	}

	if err := p.Sync(t.Context()); err == nil || !strings.Contains(err.Error(), "NXRRSET") {
		t.Fatalf("Sync with the name taken meanwhile = %v, want the update's NXRRSET", err)
	}
	s := p.Status()
	if s.Healthy || !strings.Contains(s.Error, "update shop."+testZone) || len(s.Failed) != 1 || !strings.Contains(s.Failed[0], "shop."+testZone) {
		t.Errorf("status after the failed update = %+v, want unhealthy, shop in failed", s)
	}
	if n := testutil.ToFloat64(p.metrics.changeFailures); n != 1 {
		t.Errorf("osm_dns_publisher_change_failures_total = %v, want 1", n)
	}
	if n := testutil.ToFloat64(p.metrics.failedNames); n != 1 {
		t.Errorf("osm_dns_publisher_failed_names = %v, want 1", n)
	}
	if got := b.Dig("shop."+testZone, "A"); !slices.Equal(got, []string{"10.0.0.1"}) {
		t.Errorf("shop's A record = %q, want 10.0.0.1: the other mesh's now", got)
	}

	// The next pass sees the other owner: a conflict, nothing failed.
	if err := p.Sync(t.Context()); err != nil {
		t.Fatalf("second Sync: %v", err)
	}
	s = p.Status()
	if !s.Healthy || len(s.Failed) != 0 || len(s.Owned) != 0 || len(s.Conflicts) != 1 || !strings.Contains(s.Conflicts[0], "owner=other") {
		t.Errorf("status after the second pass = %+v, want healthy, shop in conflict with owner other", s)
	}
	if n := testutil.ToFloat64(p.metrics.failedNames); n != 0 {
		t.Errorf("osm_dns_publisher_failed_names = %v, want 0", n)
	}
	if got := b.Dig("shop."+testZone, "TXT"); !slices.Equal(got, []string{`"v=spf1 -all"`}) {
		t.Errorf("shop's TXT = %q, want the SPF record untouched", got)
	}
}
