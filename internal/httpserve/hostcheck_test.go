package httpserve_test

import (
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"testing"

	"github.com/osm-vm/osm-vm/internal/httpserve"
)

// TestHostCheckOnAllInterfaces checks that a listener bound to every
// interface accepts any IP address literal (an address cannot be rebound)
// and the server's own names, and still refuses other names. (Tests listen on loopback only, so this one
// calls the check with the address such a listener would have.)
func TestHostCheckOnAllInterfaces(t *testing.T) {
	ok := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { io.WriteString(w, "ok") })
	h := httpserve.HostCheck(slog.New(slog.DiscardHandler), "debug listener", "0.0.0.0:15090", &net.TCPAddr{IP: net.IPv4zero, Port: 15090}, []string{"osm-1.example.internal"}, ok)
	for host, want := range map[string]int{
		"10.1.2.3:15090":         200,
		"[fd00::1]:15090":        200,
		"127.0.0.1:15090":        200,
		"10.1.2.3:15443":         421,
		"attacker.example:15090": 421,
		// A scraper reaching the server by one of its own names.
		"osm-1.example.internal:15090":  200,
		"OSM-1.example.internal.:15090": 200,
		"osm-2.example.internal:15090":  421,
	} {
		req := httptest.NewRequest(http.MethodGet, "/healthz", nil)
		req.Host = host
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		if rec.Code != want {
			t.Errorf("GET /healthz with Host %q = %d %s, want %d", host, rec.Code, rec.Body, want)
		}
	}
}
