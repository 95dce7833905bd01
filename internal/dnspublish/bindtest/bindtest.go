// Package bindtest runs a real BIND 9 (Debian bind9; dig and nsupdate from
// dnsutils) for tests: named on 127.0.0.1 and a free port, serving one
// primary zone from a temp dir that a TSIG key named "osm-vm" may update
// and transfer, started as the test's own process and stopped by its pid.
//
// named binds only addresses configured on an interface, and of
// 127.0.0.0/8 only 127.0.0.1 is unless addresses are added to lo (which a
// test must not do to a shared host), so each server gets its own port on
// 127.0.0.1 instead of its own 127.x.y.z.
package bindtest

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net"
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

	"github.com/osm-vm/osm-vm/internal/testaddr"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// KeyName is the TSIG key's name.
const KeyName = "osm-vm"

// Server is one named process.
type Server struct {
	t    *testing.T
	dir  string
	zone string
	// Addr is named's host:port.
	Addr string
	// AllowUpdate is the zone's allow-update list, used from the next
	// Restart (default: the key).
	AllowUpdate string

	cmd    *exec.Cmd
	waited chan struct{}
	mu     sync.Mutex
	out    bytes.Buffer
}

// NewSecret returns a random base64 TSIG secret.
func NewSecret(t *testing.T) string {
	b := make([]byte, 32)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return base64.StdEncoding.EncodeToString(b)
}

// FreeAddr returns 127.0.0.1 and a port free for TCP and UDP.
func FreeAddr(t *testing.T) string {
	for range 50 {
		addr := testaddr.Free(t) // below the ephemeral range, see there
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

func namedPath(t *testing.T) string {
	if p, err := exec.LookPath("named"); err == nil {
		return p
	}
	if _, err := os.Stat("/usr/sbin/named"); err == nil {
		return "/usr/sbin/named"
	}
	t.Fatal("named (Debian bind9) is not installed: run `make test-deps` or apt-get install bind9 dnsutils")
	return ""
}

// Start starts named serving zone (its SOA, NS and the records given, in
// zone-file syntax) with the key's secret, and waits until it answers.
func Start(t *testing.T, zone, secret string, records ...string) *Server {
	t.Helper()
	s := &Server{t: t, dir: t.TempDir(), zone: zone, Addr: FreeAddr(t), AllowUpdate: `key "` + KeyName + `";`}
	z := fmt.Sprintf("$TTL 300\n@\tIN SOA ns.%[1]s. hostmaster.%[1]s. 1 3600 600 86400 60\n@\tIN NS ns.%[1]s.\nns\tIN A 192.0.2.1\n%[2]s\n", zone, strings.Join(records, "\n"))
	if err := os.WriteFile(filepath.Join(s.dir, "zone"), []byte(z), 0o644); err != nil {
		t.Fatal(err)
	}
	s.start(secret)
	t.Cleanup(s.Stop)
	return s
}

func (s *Server) start(secret string) {
	t := s.t
	host, port, _ := net.SplitHostPort(s.Addr)
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
key "%[7]s" { algorithm hmac-sha256; secret "%[4]s"; };
zone "%[5]s" {
	type primary;
	file "%[1]s/zone";
	allow-update { %[6]s };
	allow-transfer { key "%[7]s"; };
};
`, s.dir, host, port, secret, s.zone, s.AllowUpdate, KeyName)
	if err := os.WriteFile(filepath.Join(s.dir, "named.conf"), []byte(conf), 0o644); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	s.out.Reset()
	s.mu.Unlock()
	cmd := exec.Command(namedPath(t), "-g", "-c", filepath.Join(s.dir, "named.conf"), "-n", "1")
	cmd.Stdout, cmd.Stderr = (*locked)(s), (*locked)(s)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start named: %v", err)
	}
	s.cmd, s.waited = cmd, make(chan struct{})
	go func() { _ = cmd.Wait(); close(s.waited) }()
	testwait.Until(t, fmt.Sprintf("named to answer for %s on %s", s.zone, s.Addr), func() (bool, string) {
		m := new(dns.Msg)
		m.SetQuestion(dns.Fqdn(s.zone), dns.TypeSOA)
		r, _, err := (&dns.Client{Net: "tcp", Timeout: time.Second}).Exchange(m, s.Addr)
		if err == nil && r.Rcode == dns.RcodeSuccess && len(r.Answer) > 0 {
			return true, ""
		}
		select {
		case <-s.waited:
			t.Fatalf("named exited: %s", s.Output())
		default:
		}
		return false, fmt.Sprintf("last: %v: %s", err, s.Output())
	})
}

// Stop ends named by its pid (SIGTERM, then SIGKILL) and waits for it.
func (s *Server) Stop() {
	if s.cmd == nil {
		return
	}
	_ = s.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-s.waited:
	case <-time.After(20 * time.Second):
		_ = s.cmd.Process.Kill()
		<-s.waited
	}
	s.cmd = nil
}

// Restart stops named and starts it again with secret as the key's (the
// zone and its journal are kept).
func (s *Server) Restart(secret string) {
	s.Stop()
	s.start(secret)
}

// Output is what named logged since it last started.
func (s *Server) Output() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.out.String()
}

type locked Server

func (l *locked) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.out.Write(p)
}

// Dig asks named for name's records of type typ with dig, sorted.
func (s *Server) Dig(name, typ string) []string {
	s.t.Helper()
	host, port, _ := net.SplitHostPort(s.Addr)
	out, err := exec.Command("dig", "@"+host, "-p", port, "+short", "+tcp", name, typ).CombinedOutput()
	if err != nil {
		s.t.Fatalf("dig %s %s: %v: %s (dig is in Debian's dnsutils)", name, typ, err, out)
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

// DigIs is a condition for polling: dig sees exactly want.
func (s *Server) DigIs(name, typ string, want ...string) func() (bool, string) {
	slices.Sort(want)
	return func() (bool, string) {
		got := s.Dig(name, typ)
		return slices.Equal(got, want), fmt.Sprintf("dig %s %s = %q, want %q", name, typ, got, want)
	}
}

// NSUpdate sends commands to named with nsupdate, signed with the key.
func (s *Server) NSUpdate(secret, commands string) {
	s.t.Helper()
	host, port, _ := net.SplitHostPort(s.Addr)
	cmd := exec.Command("nsupdate", "-y", "hmac-sha256:"+KeyName+":"+secret)
	cmd.Stdin = strings.NewReader(fmt.Sprintf("server %s %s\nzone %s\n%ssend\n", host, port, s.zone, commands))
	if out, err := cmd.CombinedOutput(); err != nil {
		s.t.Fatalf("nsupdate: %v: %s", err, out)
	}
}
