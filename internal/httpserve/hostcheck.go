package httpserve

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"strings"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// HostCheck answers only requests whose Host header names this listener,
// so that a web page whose own name was rebound to a loopback address (DNS
// rebinding) cannot read the listener from a browser on the machine.
// Accepted: "localhost", any loopback address, the host of the configured
// address, the bound address, the names given, and, when bound to every
// interface, any IP address literal (a page served from an IP address
// literal has that address as its origin, not the attacker's name); with
// no port or the bound port. Anything else is 421 Misdirected Request,
// naming the accepted hosts. listener names the listener in the refusal
// and the log ("debug listener", "agent metrics listener").
func HostCheck(log *slog.Logger, listener, configured string, bound net.Addr, names []string, next http.Handler) http.Handler {
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
			log.Warn(listener+" refused a request for another host (DNS rebinding?)", "host", r.Host, "remote", r.RemoteAddr, "path", r.URL.Path)
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusMisdirectedRequest)
			enc := json.NewEncoder(w)
			enc.SetIndent("", "  ")
			enc.SetEscapeHTML(false)
			_ = enc.Encode(meshapi.ErrorBody{Error: fmt.Sprintf("the %s answers only requests for %s (port %s), not Host %q: use http://127.0.0.1:%s%s", listener, acceptedText, port, r.Host, port, r.URL.Path)})
			return
		}
		next.ServeHTTP(w, r)
	})
}
