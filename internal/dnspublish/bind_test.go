//go:build dnsintegration

package dnspublish

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// These tests run a real BIND 9 (Debian bind9; dig from dnsutils) on
// 127.0.0.1 and a random port as the zone's primary, with a TSIG key. `make test`
// installs both and runs them with -tags dnsintegration.

const testZone = "example.test"

// bind is one named process serving testZone.
type bind struct {
	t *testing.T
	// allowUpdate is the zone's allow-update list (default the key).
	allowUpdate string
	dir         string
	addr        string
	secret      string
	cmd         *exec.Cmd
	waited      chan struct{}
	out         bytes.Buffer
}

func newSecret(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// freeAddr picks a port on 127.0.0.1 free for TCP and UDP. (named binds
// only addresses configured on an interface, and of 127.0.0.0/8 only
// 127.0.0.1 is, unless the test added addresses to lo, which it must not.)
func freeAddr(t *testing.T) string {
	for range 50 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			continue
		}
		addr := l.Addr().String()
		l.Close()
		u, err := net.ListenPacket("udp", addr)
		if err != nil {
			continue
		}
		u.Close()
		return addr
	}
	t.Fatal("no free loopback port for named")
	return ""
}

// startBind starts named with key secret and the zone holding extra
// records, and waits until it answers for the zone.
func startBind(t *testing.T, secret string, extra ...string) *bind {
	t.Helper()
	named, err := exec.LookPath("named")
	if err != nil {
		if _, statErr := os.Stat("/usr/sbin/named"); statErr != nil {
			t.Fatal("named (Debian bind9) is not installed: run `make test-deps` or apt-get install bind9 dnsutils")
		}
		named = "/usr/sbin/named"
	}
	b := &bind{t: t, dir: t.TempDir(), addr: freeAddr(t), secret: secret, allowUpdate: `key "osm-vm";`}
	zone := fmt.Sprintf(`$TTL 300
@	IN SOA ns.%[1]s. hostmaster.%[1]s. 1 3600 600 86400 60
@	IN NS ns.%[1]s.
ns	IN A 192.0.2.1
%[2]s
`, testZone, strings.Join(extra, "\n"))
	if err := os.WriteFile(filepath.Join(b.dir, "zone"), []byte(zone), 0o644); err != nil {
		t.Fatal(err)
	}
	b.writeConf(secret)
	b.start(named)
	return b
}

func (b *bind) writeConf(secret string) {
	host, port, _ := net.SplitHostPort(b.addr)
	conf := fmt.Sprintf(`options {
	directory "%[1]s";
	pid-file "%[1]s/named.pid";
	session-keyfile "%[1]s/session.key";
	managed-keys-directory "%[1]s";
	listen-on port %[3]s { %[2]s; };
	listen-on-v6 { none; };
	recursion no;
	dnssec-validation no;
	notify no;
};
controls { };
key "osm-vm" { algorithm hmac-sha256; secret "%[4]s"; };
zone "%[5]s" {
	type primary;
	file "%[1]s/zone";
	allow-update { %[6]s };
	allow-transfer { key "osm-vm"; };
};
`, b.dir, host, port, secret, testZone, b.allowUpdate)
	if err := os.WriteFile(filepath.Join(b.dir, "named.conf"), []byte(conf), 0o644); err != nil {
		b.t.Fatal(err)
	}
}

func (b *bind) start(named string) {
	t := b.t
	b.out.Reset()
	cmd := exec.Command(named, "-g", "-c", filepath.Join(b.dir, "named.conf"), "-n", "1")
	cmd.Stdout, cmd.Stderr = &lockedWriter{w: &b.out}, &lockedWriter{w: &b.out}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start named: %v", err)
	}
	b.cmd, b.waited = cmd, make(chan struct{})
	go func() { cmd.Wait(); close(b.waited) }()
	t.Cleanup(b.stop)
	deadline := time.Now().Add(30 * time.Second)
	for {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(testZone), dns.TypeSOA)
		r, _, err := (&dns.Client{Net: "tcp", Timeout: time.Second}).Exchange(m, b.addr)
		if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return
		}
		select {
		case <-b.waited:
			t.Fatalf("named exited: %s", b.output())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("named did not answer for %s on %s within 30s (last: %v): %s", testZone, b.addr, err, b.output())
		}
		time.Sleep(20 * time.Millisecond) // polling for readiness, not synchronizing
	}
}

// stop ends named by its pid and waits for it.
func (b *bind) stop() {
	if b.cmd == nil {
		return
	}
	_ = b.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-b.waited:
	case <-time.After(20 * time.Second):
		_ = b.cmd.Process.Kill()
		<-b.waited
	}
	b.cmd = nil
}

// restart stops named and starts it again with secret as the key (the
// zone and its journal are kept).
func (b *bind) restart(secret string) {
	b.stop()
	b.writeConf(secret)
	b.start("/usr/sbin/named")
}

func (b *bind) output() string {
	lw := &lockedWriter{w: &b.out}
	return lw.String()
}

var outMu sync.Mutex

type lockedWriter struct{ w *bytes.Buffer }

func (l *lockedWriter) Write(p []byte) (int, error) {
	outMu.Lock()
	defer outMu.Unlock()
	return l.w.Write(p)
}

func (l *lockedWriter) String() string {
	outMu.Lock()
	defer outMu.Unlock()
	return l.w.String()
}

// dig asks named for name's records of type typ with dig, sorted.
func (b *bind) dig(name, typ string) []string {
	b.t.Helper()
	host, port, _ := net.SplitHostPort(b.addr)
	out, err := exec.Command("dig", "@"+host, "-p", port, "+short", "+tcp", name, typ).CombinedOutput()
	if err != nil {
		b.t.Fatalf("dig %s %s: %v: %s", name, typ, err, out)
	}
	var lines []string
	for l := range strings.SplitSeq(strings.TrimSpace(string(out)), "\n") {
		if l != "" {
			lines = append(lines, l)
		}
	}
	slices.Sort(lines)
	return lines
}

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

// eventually polls cond until it holds or a generous deadline passes.
func eventually(t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		ok, got := cond()
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 30s; last: %s", what, got)
		}
		time.Sleep(20 * time.Millisecond) // polling a condition
	}
}

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

func digIs(b *bind, name, typ string, want ...string) func() (bool, string) {
	slices.Sort(want)
	return func() (bool, string) {
		got := b.dig(name, typ)
		return slices.Equal(got, want), fmt.Sprintf("dig %s %s = %q, want %q", name, typ, got, want)
	}
}

func TestBINDRecordsFollowTheSource(t *testing.T) {
	secret := newSecret(t)
	b := startBind(t, secret,
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
	p := startPublisher(t, b.addr, secret, "mesh-a", src)

	eventually(t, "shop's A records", digIs(b, "shop."+testZone, "A", "10.0.0.1", "10.0.0.2"))
	eventually(t, "shop's AAAA record", digIs(b, "shop."+testZone, "AAAA", "2001:db8::1"))
	eventually(t, "shop's ownership record", digIs(b, "shop."+testZone, "TXT", `"heritage=osm-vm,osm-vm/owner=mesh-a"`))
	eventually(t, "status lists the conflicts", func() (bool, string) {
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
		if got := b.dig(c.name, c.typ); !slices.Equal(got, []string{c.want}) {
			t.Errorf("dig %s %s = %q, want %q (untouched)", c.name, c.typ, got, c.want)
		}
	}

	// The addresses move.
	src.set("shop."+testZone, "10.0.0.9")
	eventually(t, "shop's A record moved", digIs(b, "shop."+testZone, "A", "10.0.0.9"))
	eventually(t, "shop's AAAA record gone", digIs(b, "shop."+testZone, "AAAA"))

	// A second name, then the first one removed.
	src.set("api."+testZone, "10.0.1.1")
	eventually(t, "api's A record", digIs(b, "api."+testZone, "A", "10.0.1.1"))
	src.set("shop." + testZone)
	eventually(t, "shop's A record removed", digIs(b, "shop."+testZone, "A"))
	eventually(t, "shop's ownership record removed", digIs(b, "shop."+testZone, "TXT"))
	if got := b.dig("api."+testZone, "A"); !slices.Equal(got, []string{"10.0.1.1"}) {
		t.Errorf("api after shop's removal = %q, want 10.0.1.1", got)
	}
	if got := b.dig("www."+testZone, "A"); !slices.Equal(got, []string{"192.0.2.80"}) {
		t.Errorf("www after every change = %q, want 192.0.2.80 (untouched)", got)
	}

	// A record changed behind the publisher's back is put right.
	host, port, _ := net.SplitHostPort(b.addr)
	nsupdate := fmt.Sprintf("server %s %s\nzone %s\nupdate delete api.%s A\nupdate add api.%s 30 A 10.9.9.9\nsend\n", host, port, testZone, testZone, testZone)
	cmd := exec.Command("nsupdate", "-y", "hmac-sha256:osm-vm:"+secret)
	cmd.Stdin = strings.NewReader(nsupdate)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("nsupdate: %v: %s", err, out)
	}
	eventually(t, "api's A record restored by the resync", digIs(b, "api."+testZone, "A", "10.0.1.1"))
}

func TestBINDWrongKeyMakesThePublisherUnhealthyUntilFixed(t *testing.T) {
	good := newSecret(t)
	b := startBind(t, newSecret(t)) // the server knows another secret
	src := newFakeSource()
	src.set("shop."+testZone, "10.0.0.1")
	p := startPublisher(t, b.addr, good, "mesh-a", src)

	eventually(t, "unhealthy with the TSIG cause", func() (bool, string) {
		s := p.Status()
		return !s.Healthy && strings.Contains(s.Error, "TSIG"), fmt.Sprintf("%+v", s)
	})
	if got := b.dig("shop."+testZone, "A"); len(got) != 0 {
		t.Fatalf("shop published with a wrong key: %q", got)
	}

	b.restart(good) // the operator fixes the server's key
	eventually(t, "healthy again", func() (bool, string) {
		s := p.Status()
		return s.Healthy, fmt.Sprintf("%+v", s)
	})
	eventually(t, "shop published after the fix", digIs(b, "shop."+testZone, "A", "10.0.0.1"))
}

func TestBINDRefusedUpdateIsUnhealthy(t *testing.T) {
	secret := newSecret(t)
	b := startBind(t, secret)
	b.allowUpdate = "none;" // the key may read the zone but not change it
	b.restart(secret)
	src := newFakeSource()
	src.set("shop."+testZone, "10.0.0.1")
	p := startPublisher(t, b.addr, secret, "mesh-a", src)
	eventually(t, "unhealthy with REFUSED", func() (bool, string) {
		s := p.Status()
		return !s.Healthy && strings.Contains(s.Error, "REFUSED") && strings.Contains(s.Error, "allow-update"), fmt.Sprintf("%+v", s)
	})
}

func TestBINDUnreachableServerIsUnhealthy(t *testing.T) {
	addr := freeAddr(t) // nothing listens there
	src := newFakeSource()
	src.set("shop."+testZone, "10.0.0.1")
	p := startPublisher(t, addr, newSecret(t), "mesh-a", src)
	eventually(t, "unhealthy naming the server", func() (bool, string) {
		s := p.Status()
		return !s.Healthy && strings.Contains(s.Error, addr), fmt.Sprintf("%+v", s)
	})
}
