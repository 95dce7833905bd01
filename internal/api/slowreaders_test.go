package api

import (
	"bufio"
	"context"
	"crypto/rand"
	"crypto/tls"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/osm-vm/osm-vm/internal/join"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// The slow readers run in a helper process (this test binary, started by
// TestSlowReadersReleaseTheServer), so that the descriptors and the heap
// the test measures are the server's alone.
const (
	slowReadersEnv        = "OSM_TEST_SLOW_READERS"         // the server's address
	slowReadersCountEnv   = "OSM_TEST_SLOW_READERS_COUNT"   // how many connections
	slowReadersSourcesEnv = "OSM_TEST_SLOW_READERS_SOURCES" // from how many loopback addresses
)

func TestMain(m *testing.M) {
	if addr := os.Getenv(slowReadersEnv); addr != "" {
		os.Exit(runSlowReaders(addr))
	}
	os.Exit(m.Run())
}

// runSlowReaders waits for a line on stdin, then opens the connections
// (each with a 4 KiB receive buffer, from 127.0.1.1, 127.0.1.2, ...), sends
// each a request for the agent package, prints "connected" and never reads
// until stdin ends.
func runSlowReaders(addr string) int {
	n, _ := strconv.Atoi(os.Getenv(slowReadersCountEnv))
	sources, _ := strconv.Atoi(os.Getenv(slowReadersSourcesEnv))
	in := bufio.NewReader(os.Stdin)
	if _, err := in.ReadString('\n'); err != nil {
		return 1
	}
	var conns []net.Conn
	for i := range n {
		d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 1, byte(1+i%sources))}, Control: smallReceiveBuffer}
		raw, err := d.Dial("tcp", addr)
		if err != nil {
			fmt.Fprintln(os.Stderr, "dial:", err)
			return 1
		}
		// The test's server has a self-signed certificate; what is tested
		// is what a client costs it, not who it is.
		c := tls.Client(raw, &tls.Config{InsecureSkipVerify: true})
		if _, err := fmt.Fprintf(c, "GET %sdeb?arch=amd64 HTTP/1.1\r\nHost: %s\r\n\r\n", join.PackagePath, addr); err != nil {
			fmt.Fprintln(os.Stderr, "request:", err)
			return 1
		}
		conns = append(conns, c)
	}
	fmt.Println("connected")
	io.Copy(io.Discard, in)
	for _, c := range conns {
		c.Close()
	}
	return 0
}

// smallReceiveBuffer sets SO_RCVBUF before connecting, so the window the
// client offers stays small and the server's writes block at once.
func smallReceiveBuffer(_, _ string, rc syscall.RawConn) error {
	var err error
	if cerr := rc.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	}); cerr != nil {
		return cerr
	}
	return err
}

// usage is what the test process holds: open descriptors, live heap after
// a collection, goroutines.
type usage struct {
	fds        int
	heap       uint64
	goroutines int
}

func measure(t *testing.T) usage {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Fatal(err)
	}
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return usage{fds: len(entries), heap: ms.HeapAlloc, goroutines: runtime.NumGoroutine()}
}

func (u usage) String() string {
	return fmt.Sprintf("%d descriptors, %.1f MiB heap, %d goroutines", u.fds, float64(u.heap)/(1<<20), u.goroutines)
}

// serveJoin runs the HTTPS API with the join route over a package of size
// bytes, with opts and limits, until the test ends; it returns the bound
// address and the package.
func serveJoin(t *testing.T, size int, opts ServeOptions, limits join.Limits) (string, []byte) {
	t.Helper()
	dir := t.TempDir()
	pkg := make([]byte, size)
	rand.Read(pkg)
	if err := os.WriteFile(filepath.Join(dir, "osm-agent_1.0.0_amd64.deb"), pkg, 0o644); err != nil {
		t.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	public := []Route{{Pattern: join.Prefix, Handler: join.NewHandler(log, []byte("ca"), dir, limits)}}
	h, err := InstrumentHTTPS(NewHTTPSHandler(log, testAdminToken, public, http.NotFoundHandler()), prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	ready := make(chan net.Addr, 1)
	opts.Ready = ready
	done := make(chan error, 1)
	go func() { done <- ServeTLS(ctx, log, "127.0.0.1:0", selfSignedTLS(t), h, opts) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	select {
	case a := <-ready:
		return a.String(), pkg
	case err := <-done:
		t.Fatalf("ServeTLS: %v", err)
		return "", nil
	}
}

// download fetches the package from addr over a fresh connection, taking
// at most chunk bytes every pause (0: as fast as it comes).
func download(t *testing.T, addr string, chunk int, pause time.Duration) (int, []byte, error) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, DisableKeepAlives: true}}
	resp, err := hc.Get("https://" + addr + join.PackagePath + "deb?arch=amd64")
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	if pause == 0 {
		b, err := io.ReadAll(resp.Body)
		return resp.StatusCode, b, err
	}
	var got []byte
	buf := make([]byte, chunk)
	for {
		n, err := io.ReadFull(resp.Body, buf)
		got = append(got, buf[:n]...)
		if err == io.EOF || err == io.ErrUnexpectedEOF {
			return resp.StatusCode, got, nil
		}
		if err != nil {
			return resp.StatusCode, got, err
		}
		time.Sleep(pause) // the slow client's pace, not a wait for the server
	}
}

// TestSlowReadersReleaseTheServer: 200 TLS clients from 50 addresses
// request the agent package and never read. The server holds at most the
// download bound's connections and files at any time (the others are
// refused and closed at once), cuts the held ones when their writes are
// not taken within the write timeout, and its descriptors, heap and
// goroutines return to what they were before. Before the bounds it held
// every connection and its open package, with their buffers, for as long
// as the clients liked.
func TestSlowReadersReleaseTheServer(t *testing.T) {
	const (
		clients   = 200
		sources   = 50
		downloads = 8
		perClient = 2
	)
	addr, pkg := serveJoin(t, 4<<20, ServeOptions{WriteTimeout: time.Second, MinWriteRate: 1 << 20}, join.Limits{Downloads: downloads, PerClient: perClient})
	// One whole download first: what the server allocates once is in the
	// baseline.
	if code, got, err := download(t, addr, 0, 0); err != nil || code != http.StatusOK || len(got) != len(pkg) {
		t.Fatalf("warm-up download: %d, %d bytes, %v", code, len(got), err)
	}

	helper := exec.Command(os.Args[0], "-test.run=^$")
	helper.Env = append(os.Environ(), slowReadersEnv+"="+addr, slowReadersCountEnv+"="+strconv.Itoa(clients), slowReadersSourcesEnv+"="+strconv.Itoa(sources))
	helper.Stderr = os.Stderr
	stdin, err := helper.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	stdout, err := helper.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := helper.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stdin.Close()
		helper.Wait()
	}()
	base := measure(t) // the helper's pipes included

	// Sample the server's usage while the slow readers come and go.
	var (
		mu   sync.Mutex
		peak usage
	)
	stop, sampled := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(sampled)
		for {
			entries, _ := os.ReadDir("/proc/self/fd")
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mu.Lock()
			peak.fds, peak.heap = max(peak.fds, len(entries)), max(peak.heap, ms.HeapAlloc)
			peak.goroutines = max(peak.goroutines, runtime.NumGoroutine())
			mu.Unlock()
			select {
			case <-stop:
				return
			case <-time.After(10 * time.Millisecond):
			}
		}
	}()

	if _, err := io.WriteString(stdin, "go\n"); err != nil {
		t.Fatal(err)
	}
	connected := make(chan error, 1)
	go func() {
		line, err := bufio.NewReader(stdout).ReadString('\n')
		if err == nil && line != "connected\n" {
			err = fmt.Errorf("the helper said %q", line)
		}
		connected <- err
	}()
	select {
	case err := <-connected:
		if err != nil {
			t.Fatalf("slow readers: %v", err)
		}
	case <-time.After(testwait.Bound(t)):
		t.Fatal("the slow readers did not connect")
	}
	var now usage
	testwait.Until(t, "the server's descriptors, heap and goroutines back to their baseline ("+base.String()+")", func() (bool, string) {
		now = measure(t)
		return now.fds <= base.fds && now.heap <= base.heap+2<<20 && now.goroutines <= base.goroutines+2, "now " + now.String()
	})
	close(stop)
	<-sampled
	t.Logf("%d slow readers from %d addresses: baseline %v; peak %v; after %v", clients, sources, base, peak, now)
	// Each held download is a socket and the open package; a refused
	// client's socket is closed as soon as it is answered.
	if limit := base.fds + 2*downloads + 4; peak.fds > limit {
		t.Errorf("the server held %d descriptors at its peak, want at most %d (baseline %d + a socket and a file per download of %d)", peak.fds, limit, base.fds, downloads)
	}

	// The clients are still connected; the bound is free again.
	if code, got, err := download(t, addr, 0, 0); err != nil || code != http.StatusOK || string(got) != string(pkg) {
		t.Errorf("download after the slow readers were cut: %d, %d bytes, %v; want the whole package", code, len(got), err)
	}
}

// TestSlowHonestDownloadRunsToItsEnd: a client that takes the package
// steadily but slowly, for several times the write timeout, gets it
// whole: the timeout bounds each write, not the response.
func TestSlowHonestDownloadRunsToItsEnd(t *testing.T) {
	const writeTimeout = time.Second
	addr, pkg := serveJoin(t, 2<<20, ServeOptions{WriteTimeout: writeTimeout, MinWriteRate: 64 << 10}, join.Limits{})
	start := time.Now()
	code, got, err := download(t, addr, 32<<10, 50*time.Millisecond)
	took := time.Since(start)
	if err != nil || code != http.StatusOK || string(got) != string(pkg) {
		t.Fatalf("slow download: %d, %d of %d bytes, %v", code, len(got), len(pkg), err)
	}
	if took < 2*writeTimeout {
		t.Errorf("the slow download took %v: not slow enough to show the write timeout bounds each write only", took)
	}
}
