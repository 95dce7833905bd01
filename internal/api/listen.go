package api

import (
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"time"
)

// DefaultHandshakeTimeout bounds, unless ServeOptions say otherwise, how
// long a connection to the HTTPS API may take to finish its TLS handshake,
// and how long any connection may take to send its request headers. A
// client on a slow link handshakes in well under a second; a connection
// that sends nothing holds a socket and a goroutine, so it is closed.
const DefaultHandshakeTimeout = 5 * time.Second

// DefaultIdleTimeout is how long a keep-alive connection may wait for its
// next request unless ServeOptions say otherwise.
const DefaultIdleTimeout = 2 * time.Minute

// DefaultReadTimeout bounds the read of a whole request, body included,
// unless ServeOptions say otherwise: bodies are small (a CSR, a
// specification; the debug listener takes none), so a client sending one
// a byte at a time is cut off.
const DefaultReadTimeout = time.Minute

// ServeOptions are the settings of a listener served by this package.
type ServeOptions struct {
	// Ready, when not nil, receives the bound address once listening
	// (tests pass port 0).
	Ready chan<- net.Addr
	// HandshakeTimeout bounds the TLS handshake (HTTPS API) and the read
	// of a request's headers (both listeners); 0 means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// IdleTimeout bounds how long a keep-alive connection waits for its
	// next request; 0 means DefaultIdleTimeout.
	IdleTimeout time.Duration
	// ReadTimeout bounds the read of a whole request, body included (at
	// least HandshakeTimeout); 0 means DefaultReadTimeout.
	ReadTimeout time.Duration
	// Names are further host names and addresses the debug listener
	// answers to (the server's own: its host name, serverNames), for a
	// scraper that reaches it by name; the HTTPS API ignores them.
	Names []string
}

// server returns an http.Server for h with the options' bounds. net/http
// bounds a TLS handshake by the smallest of its read and write timeouts,
// which is ReadHeaderTimeout here (ReadTimeout is at least it).
func (o ServeOptions) server(h http.Handler) *http.Server {
	hs, idle, read := o.HandshakeTimeout, o.IdleTimeout, o.ReadTimeout
	if hs <= 0 {
		hs = DefaultHandshakeTimeout
	}
	if idle <= 0 {
		idle = DefaultIdleTimeout
	}
	if read <= 0 {
		read = DefaultReadTimeout
	}
	return &http.Server{Handler: h, ReadHeaderTimeout: hs, ReadTimeout: max(read, hs), IdleTimeout: idle}
}

// hostCheck answers only requests whose Host header names this listener,
// so a web page whose own name was rebound to a loopback address (DNS
// rebinding) cannot read the debug listener from a browser on the server
// host. Accepted: "localhost", any loopback address, the host of the
// configured address, the bound address, the names given, and, when bound
// to every interface, any IP address literal (a page served from an IP
// address literal has that address as its origin, not the attacker's
// name); with no port or the bound port. Anything else is 421 Misdirected
// Request.
func hostCheck(log *slog.Logger, configured string, bound net.Addr, names []string, next http.Handler) http.Handler {
	boundAP, _ := netip.ParseAddrPort(bound.String())
	port := fmt.Sprint(boundAP.Port())
	norm := func(h string) string { return strings.ToLower(strings.TrimSuffix(h, ".")) }
	cfgHost, _, _ := net.SplitHostPort(configured)
	cfgHost = norm(cfgHost)
	accepted := []string{"localhost", "127.0.0.1", "[::1]"}
	known := map[string]bool{"localhost": true}
	add := func(h string) {
		if h = norm(h); h == "" || known[h] {
			return
		}
		if ip, err := netip.ParseAddr(h); err == nil && (ip.IsLoopback() || ip.IsUnspecified()) {
			return // loopback is accepted anyway; the wildcard is no host
		}
		known[h] = true
		accepted = append(accepted, h)
	}
	add(cfgHost)
	add(boundAP.Addr().String())
	for _, n := range names {
		add(n)
	}
	if boundAP.Addr().IsUnspecified() {
		accepted = append(accepted, "any IP address")
	}
	acceptedText := strings.Join(accepted, ", ")
	ok := func(hostport string) bool {
		host, p, err := net.SplitHostPort(hostport)
		if err != nil { // no port
			host, p = strings.TrimSuffix(strings.TrimPrefix(hostport, "["), "]"), port
		}
		if p != port {
			return false
		}
		if host = norm(host); known[host] {
			return true
		}
		ip, err := netip.ParseAddr(host)
		if err != nil {
			return false // a name: only those above
		}
		ip = ip.Unmap()
		return ip.IsLoopback() || ip == boundAP.Addr().Unmap() || boundAP.Addr().IsUnspecified()
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !ok(r.Host) {
			log.Warn("debug listener refused a request for another host (DNS rebinding?)", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
			writeError(w, http.StatusMisdirectedRequest, fmt.Errorf("the debug listener answers only requests for %s (port %s), not Host %q: use http://127.0.0.1:%s%s", acceptedText, port, r.Host, port, r.URL.Path))
			return
		}
		next.ServeHTTP(w, r)
	})
}
