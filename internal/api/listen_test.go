package api

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/catalog"
)

// serveDebug runs a debug server on addr with opts until the test ends and
// returns the bound address.
func serveDebug(t *testing.T, addr string, opts ServeOptions) string {
	t.Helper()
	s := New(slog.New(slog.DiscardHandler), "test", testAdminToken, catalog.New(), fakeProviders{ready: true}, Options{XDS: fakeXDS{}})
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	opts.Ready = ready
	done := make(chan error, 1)
	go func() { done <- s.Serve(ctx, addr, opts) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("debug Serve after cancel: %v", err)
		}
	})
	select {
	case a := <-ready:
		return a.String()
	case err := <-done:
		t.Fatalf("debug Serve: %v", err)
		return ""
	}
}

// serveHTTPS runs ServeTLS with a self-signed certificate for 127.0.0.1
// until the test ends and returns the bound address.
func serveHTTPS(t *testing.T, opts ServeOptions) string {
	t.Helper()
	cfg := selfSignedTLS(t)
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	opts.Ready = ready
	done := make(chan error, 1)
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "hello") })
	go func() { done <- ServeTLS(ctx, slog.New(slog.DiscardHandler), "127.0.0.1:0", cfg, h, opts) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return (<-ready).String()
}

// selfSignedTLS is a server TLS config with a self-signed certificate for
// 127.0.0.1.
func selfSignedTLS(t *testing.T) *tls.Config {
	t.Helper()
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "osm-server"}, NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour), IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	return &tls.Config{Certificates: []tls.Certificate{{Certificate: [][]byte{der}, PrivateKey: key}}, MinVersion: tls.VersionTLS12}
}

// closedWithin opens a TCP connection to addr, sends first, and waits (up
// to a generous guard) for the server to close it; it fails the test if
// that took longer than bound.
func closedWithin(t *testing.T, addr string, first []byte, bound time.Duration) {
	t.Helper()
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if len(first) > 0 {
		if _, err := c.Write(first); err != nil {
			t.Fatal(err)
		}
	}
	waitClosed(t, c, bound)
}

// waitClosed reads (and drops) what the server sends on c until it closes
// the connection, and fails unless that is within bound.
func waitClosed(t *testing.T, c net.Conn, bound time.Duration) {
	t.Helper()
	start := time.Now()
	const guard = 30 * time.Second
	c.SetReadDeadline(start.Add(guard))
	_, err := io.Copy(io.Discard, c) // returns when the server closes (or resets) the connection
	took := time.Since(start)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the server still held the connection after %v", guard)
	}
	if took > bound {
		t.Errorf("the server closed the connection after %v, want within %v", took.Round(time.Millisecond), bound)
	}
}

// TestListenersCloseStalledConnections opens connections that never finish
// their TLS handshake or their request headers and checks both listeners
// close them within the configured bound (plus slack for a busy machine),
// far below the 10 s they were held before.
func TestListenersCloseStalledConnections(t *testing.T) {
	const timeout = 300 * time.Millisecond
	const bound = 3 * time.Second // timeout plus scheduling slack; the default is 5 s
	opts := ServeOptions{HandshakeTimeout: timeout}
	debug := serveDebug(t, "127.0.0.1:0", opts)
	https := serveHTTPS(t, opts)
	// A TLS record header announcing a 512-byte ClientHello, and its first byte.
	halfHello := []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01}
	for _, tc := range []struct {
		name, addr string
		first      []byte
	}{
		{"HTTPS API, nothing sent", https, nil},
		{"HTTPS API, half a ClientHello", https, halfHello},
		{"debug listener, nothing sent", debug, nil},
		{"debug listener, half a request line", debug, []byte("GET /healthz HT")},
		{"debug listener, headers never ended", debug, []byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			closedWithin(t, tc.addr, tc.first, bound)
		})
	}
}

// TestListenersCloseIdleKeepAlives checks a keep-alive connection that
// sends no further request is closed after the idle timeout.
func TestListenersCloseIdleKeepAlives(t *testing.T) {
	opts := ServeOptions{IdleTimeout: 300 * time.Millisecond}
	addr := serveDebug(t, "127.0.0.1:0", opts)
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	br := bufio.NewReader(c)
	resp, err := http.ReadResponse(br, nil)
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET /healthz = %d", resp.StatusCode)
	}
	start := time.Now()
	c.SetReadDeadline(start.Add(30 * time.Second))
	_, err = br.ReadByte()
	if took := time.Since(start); errors.Is(err, os.ErrDeadlineExceeded) || took > 3*time.Second {
		t.Errorf("idle keep-alive connection closed after %v (%v), want about 300ms", took.Round(time.Millisecond), err)
	}
}

// TestDebugListenerChecksHost sends requests with the Host headers a
// browser would send: its own names pass, any other name (a DNS-rebound
// attacker's) is refused with 421 naming the accepted hosts.
func TestDebugListenerChecksHost(t *testing.T) {
	addr := serveDebug(t, "127.0.0.1:0", ServeOptions{})
	_, port, _ := net.SplitHostPort(addr)
	for _, tc := range []struct {
		host     string
		wantCode int
	}{
		{"127.0.0.1:" + port, 200},
		{"localhost:" + port, 200},
		{"LOCALHOST.:" + port, 200},
		{"127.0.0.2:" + port, 200},
		{"[::1]:" + port, 200},
		{"localhost", 200},
		{"attacker.example:" + port, 421},
		{"attacker.example", 421},
		{"127.0.0.1.nip.io:" + port, 421},
		{"localhost.attacker.example:" + port, 421},
		{"10.1.2.3:" + port, 421}, // not this listener's address
		{"127.0.0.1:1", 421},      // another port: another service
	} {
		t.Run(tc.host, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://"+addr+"/healthz", nil)
			req.Host = tc.host
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Fatal(err)
			}
			b, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode != tc.wantCode {
				t.Fatalf("GET /healthz with Host %q = %d %s, want %d", tc.host, resp.StatusCode, b, tc.wantCode)
			}
			if tc.wantCode == 421 && (!strings.Contains(string(b), "localhost, 127.0.0.1, [::1]") || !strings.Contains(string(b), "http://127.0.0.1:"+port+"/healthz")) {
				t.Errorf("refusal %s does not name the accepted hosts and the URL to use", b)
			}
		})
	}
}

// TestDebugListenerCutsSlowBodies: a request whose body comes a byte at a
// time (under the header bound, never silent) is cut off at the whole
// request's bound; before ReadTimeout the debug listener held it for as
// long as the client kept dripping.
func TestDebugListenerCutsSlowBodies(t *testing.T) {
	addr := serveDebug(t, "127.0.0.1:0", ServeOptions{HandshakeTimeout: 300 * time.Millisecond, ReadTimeout: 500 * time.Millisecond})
	c, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 100000\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	defer close(done)
	go func() { // the slow client: a byte every 50 ms, until the server hangs up
		tick := time.NewTicker(50 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-done:
				return
			case <-tick.C:
				if _, err := c.Write([]byte{'x'}); err != nil {
					return
				}
			}
		}
	}()
	waitClosed(t, c, 5*time.Second) // the response, then the close: about 500ms
}

// TestProfilesOutlastTheBounds: a CPU profile or trace runs for the
// seconds asked even when they exceed the whole-request read bound (which
// bounds reading the request, not the handler or the response) and the
// write timeout (which bounds each write, not the response).
func TestProfilesOutlastTheBounds(t *testing.T) {
	addr := serveDebug(t, "127.0.0.1:0", ServeOptions{HandshakeTimeout: 200 * time.Millisecond, ReadTimeout: 300 * time.Millisecond, WriteTimeout: 300 * time.Millisecond})
	for _, path := range []string{"/debug/pprof/profile?seconds=1", "/debug/pprof/trace?seconds=1"} {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("Authorization", "Bearer "+testAdminToken)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took := time.Since(start)
		if err != nil || resp.StatusCode != http.StatusOK || n == 0 {
			t.Fatalf("GET %s = %d, %d bytes, %v", path, resp.StatusCode, n, err)
		}
		if took < time.Second {
			t.Errorf("GET %s ended after %v: cut short of the second asked by the 300ms bounds", path, took.Round(time.Millisecond))
		}
	}
}
