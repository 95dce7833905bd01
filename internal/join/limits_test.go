package join_test

import (
	"crypto/rand"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"github.com/osm-vm/osm-vm/internal/join"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// slowReader opens a connection from the loopback address from with a
// small receive buffer, requests the package and never reads: it holds a
// download slot for as long as the server lets it.
func slowReader(t *testing.T, server, from string) net.Conn {
	t.Helper()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Control: smallReceiveBuffer}
	c, err := d.Dial("tcp", server)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	if _, err := fmt.Fprintf(c, "GET %sdeb?arch=amd64 HTTP/1.1\r\nHost: %s\r\n\r\n", join.PackagePath, server); err != nil {
		t.Fatal(err)
	}
	return c
}

// smallReceiveBuffer sets SO_RCVBUF before connecting, so the window the
// client offers stays small.
func smallReceiveBuffer(_, _ string, rc syscall.RawConn) error {
	var err error
	if cerr := rc.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	}); cerr != nil {
		return cerr
	}
	return err
}

// request sends method to the package route from the loopback address
// from and returns the response with its body read.
func request(t *testing.T, server, from, method string) (*http.Response, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}).DialContext, DisableKeepAlives: true}}
	req, err := http.NewRequest(method, "http://"+server+join.PackagePath+"deb?arch=amd64", nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s from %s: reading the body: %v", method, from, err)
	}
	return resp, string(b)
}

// TestDownloadsBounded: clients that request the package and never read
// hold download slots; past the bound per client address the next request
// from that address gets 429, past the global bound any other address gets
// 503, both with Retry-After, a message naming the bound, and the
// connection closed; once the slow clients go, a download is served
// whole again. Before the bounds every request was served, however many.
func TestDownloadsBounded(t *testing.T) {
	dir := t.TempDir()
	pkg := make([]byte, 4<<20) // far more than the sockets' buffers hold
	rand.Read(pkg)
	if err := os.WriteFile(filepath.Join(dir, "osm-agent_1.0.0_amd64.deb"), pkg, 0o644); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(join.NewHandler(slog.New(slog.DiscardHandler), []byte(caPEM), dir, join.Limits{Downloads: 3, PerClient: 2}))
	t.Cleanup(srv.Close)
	addr := srv.Listener.Addr().String()

	slow := []net.Conn{
		slowReader(t, addr, "127.0.0.2"),
		slowReader(t, addr, "127.0.0.2"),
		slowReader(t, addr, "127.0.0.3"),
	}
	// HEAD takes a slot like GET: it is refused once the two slow
	// downloads from 127.0.0.2 hold that address's slots.
	var resp *http.Response
	var body string
	testwait.For(t, "a third download from 127.0.0.2 refused with 429", func() bool {
		resp, _ = request(t, addr, "127.0.0.2", http.MethodHead)
		t.Log("DEBUG", resp.StatusCode)
		return resp.StatusCode == http.StatusTooManyRequests
	})
	resp, body = request(t, addr, "127.0.0.2", http.MethodGet)
	if resp.StatusCode != http.StatusTooManyRequests {
		t.Errorf("GET from 127.0.0.2 while it holds two downloads = %d, want 429", resp.StatusCode)
	}
	if !strings.Contains(body, "2 downloads from 127.0.0.2") || !strings.Contains(body, "joinDownloadsPerClient") {
		t.Errorf("429 body %q does not name the bound per client address and its key", body)
	}
	checkRefusal(t, resp)

	testwait.For(t, "a download from 127.0.0.4 refused with 503 while three are held", func() bool {
		resp, body = request(t, addr, "127.0.0.4", http.MethodHead)
		return resp.StatusCode == http.StatusServiceUnavailable
	})
	resp, body = request(t, addr, "127.0.0.4", http.MethodGet)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "to 3 machines already") || !strings.Contains(body, "joinDownloads ") {
		t.Errorf("GET while three downloads are held = %d %q, want 503 naming the bound of 3 (joinDownloads)", resp.StatusCode, body)
	}
	checkRefusal(t, resp)

	for _, c := range slow {
		c.Close()
	}
	testwait.For(t, "the whole package served again once the slow clients left", func() bool {
		resp, body = request(t, addr, "127.0.0.4", http.MethodGet)
		return resp.StatusCode == http.StatusOK && body == string(pkg)
	})
}

func checkRefusal(t *testing.T, resp *http.Response) {
	t.Helper()
	if got := resp.Header.Get("Retry-After"); got != "10" {
		t.Errorf("%s: Retry-After %q, want 10", resp.Status, got)
	}
	if !resp.Close {
		t.Errorf("%s: the server keeps the refused connection open", resp.Status)
	}
}
