package xds

import (
	"context"
	"crypto/tls"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"

	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// nackOnce opens a stream with cert as node cn over a new connection
// (resuming a TLS session from sessions), asks for clusters, rejects the
// answer with msg and returns once the server has handled the rejection:
// requests are handled in order, so the answer to a listener request sent
// after it says so.
func (e *env) nackOnce(t *testing.T, cert tls.Certificate, cn, msg string, sessions tls.ClientSessionCache) {
	t.Helper()
	e.nackOpen(t, cert, cn, msg, sessions)()
}

// nackOpen is nackOnce with the stream left open until the returned func
// is called (the server forgets a proxy's NACKs when it leaves).
func (e *env) nackOpen(t *testing.T, cert tls.Certificate, cn, msg string, sessions tls.ClientSessionCache) (closeConn func()) {
	t.Helper()
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: e.certs.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS13, ClientSessionCache: sessions})
	conn, err := grpc.NewClient(e.addr, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), testwait.Bound(t))
	closeConn = func() { cancel(); conn.Close() }
	defer func() {
		if t.Failed() {
			closeConn()
		}
	}()
	s, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{Node: envoyNode(cn, "10.0.0.10"), TypeUrl: resource.ClusterType}); err != nil {
		t.Fatal(err)
	}
	resp, err := s.Recv()
	if err != nil {
		t.Fatal(err)
	}
	nack := &discovery.DiscoveryRequest{TypeUrl: resource.ClusterType, ResponseNonce: resp.GetNonce(), ErrorDetail: &rpcstatus.Status{Code: 3, Message: msg}}
	if err := s.Send(nack); err != nil {
		t.Fatal(err)
	}
	if err := s.Send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType}); err != nil {
		t.Fatal(err)
	}
	for {
		resp, err := s.Recv()
		if err != nil {
			t.Fatalf("waiting for the listeners after a NACK: %v", err)
		}
		if resp.GetTypeUrl() == resource.ListenerType {
			return closeConn
		}
	}
}

// nackLines returns the lines of log that report a proxy's rejection.
func nackLines(log *testlog.Buffer) []string {
	var out []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.Contains(l, "rejected") {
			out = append(out, l)
		}
	}
	return out
}

// A proxy's NACK message is the proxy's to choose: a 3 MB one is kept,
// served (/debug/proxies, the dashboard) and logged cut to
// maxNACKMessage, on a rune boundary, saying how much was cut.
func TestLargeNACKIsStoredAndLoggedBounded(t *testing.T) {
	var log testlog.Buffer
	e := startEnvWith(t, envOptions{log: log.Logger()})
	cert := e.enroll(t, "bookbuyer")
	cn := cnOf(t, cert)
	// A two-byte rune at every odd offset: a cut at an even byte count
	// would split one.
	msg := "x" + strings.Repeat("é", 3<<20/2)
	closeConn := e.nackOpen(t, cert, cn, msg, nil)
	defer closeConn()

	nacks := e.cache.NACKs()
	if len(nacks) != 1 {
		t.Fatalf("NACKs recorded: %d, want 1", len(nacks))
	}
	got := nacks[0].Error
	if len(got) > maxNACKMessage {
		t.Errorf("stored NACK message: %d bytes, want at most %d", len(got), maxNACKMessage)
	}
	if !utf8.ValidString(got) || !strings.HasPrefix(got, "xéé") || !strings.Contains(got, "bytes cut]") {
		t.Errorf("stored NACK message %.80q...%q: want valid UTF-8, the message's start and a marker saying how much was cut", got, got[max(0, len(got)-40):])
	}
	for _, p := range (Debug{Server: e.srv, Cache: e.cache}).Proxies() {
		for _, ty := range p.Types {
			if ty.NACK != nil && len(ty.NACK.Error) > maxNACKMessage {
				t.Errorf("/debug/proxies serves a %d-byte NACK message", len(ty.NACK.Error))
			}
		}
	}
	lines := nackLines(&log)
	if len(lines) != 1 {
		t.Fatalf("log lines reporting the NACK: %d, want 1", len(lines))
	}
	if len(lines[0]) > 2*maxNACKMessage {
		t.Errorf("the NACK's log line is %d bytes, want at most %d", len(lines[0]), 2*maxNACKMessage)
	}
}

// A proxy that reconnects and NACKs over and over is logged once, then at
// most once per nackLogEvery with the count of NACKs not logged: the
// limit is the proxy's identity's, not its stream's.
func TestReconnectingNACKsAreLogRateLimited(t *testing.T) {
	var log testlog.Buffer
	e := startEnvWith(t, envOptions{log: log.Logger()})
	cert := e.enroll(t, "bookbuyer")
	cn := cnOf(t, cert)
	sessions := tls.NewLRUClientSessionCache(4)
	start := time.Now()
	const cycles = 100
	for i := range cycles {
		e.nackOnce(t, cert, cn, "listener 10.0.0.10:14001: cannot bind", sessions)
		if i == 0 {
			if n := len(nackLines(&log)); n != 1 {
				t.Fatalf("after the first NACK: %d log lines report it, want 1", n)
			}
		}
	}
	lines := nackLines(&log)
	if most := 1 + int(time.Since(start)/nackLogEvery); len(lines) > most {
		t.Errorf("%d reconnect+NACK cycles of one proxy wrote %d log lines reporting them, want at most %d:\n%s", cycles, len(lines), most, strings.Join(lines[:min(len(lines), 5)], "\n"))
	}
}

func TestLogLimiter(t *testing.T) {
	now := time.Unix(1000, 0)
	l := newLogLimiter(time.Minute, 2, func() time.Time { return now })
	type want struct {
		ok         bool
		suppressed int
		shared     bool
	}
	step := func(key string, w want) {
		t.Helper()
		ok, n, shared := l.allow(key)
		if got := (want{ok, n, shared}); got != w {
			t.Errorf("at %s, allow(%q) = %+v, want %+v", now.Format(time.TimeOnly), key, got, w)
		}
	}
	step("a", want{ok: true})
	step("a", want{})
	step("a", want{})
	step("b", want{ok: true}) // another proxy is limited apart
	now = now.Add(59 * time.Second)
	step("a", want{})
	now = now.Add(time.Second)
	step("a", want{ok: true, suppressed: 3})
	// b, whose last NACK is a minute old, was forgotten: its place is
	// free. Beyond max keys, the others share one limit.
	step("c", want{ok: true})
	step("d", want{ok: true, shared: true})
	step("e", want{shared: true})
	now = now.Add(time.Minute)
	step("e", want{ok: true})
	if len(l.keys) > 2 {
		t.Errorf("the limiter holds %d keys, want at most 2", len(l.keys))
	}
	if _, ok := l.keys["a"]; ok {
		t.Error("a is still held a minute after its last NACK")
	}
}
