package agent_test

import (
	"io"
	"net"
	"net/http"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/osm-vm/osm-vm/internal/agent"
	"github.com/osm-vm/osm-vm/internal/testaddr"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestMetricsListenerChecksHost: the agent's metrics listener answers the
// Host headers a browser or scraper on the machine sends for it (loopback
// names, its bound address) and refuses any other name with 421, so a web
// page whose name was rebound to 127.0.0.1 cannot read it (DNS
// rebinding). Before, it answered every Host.
func TestMetricsListenerChecksHost(t *testing.T) {
	h := newHarness(t)
	addr := testaddr.Free(t)
	h.metrics, h.cfg.MetricsAddress = prometheus.NewRegistry(), addr
	if err := agent.SaveJoinToken(h.cfg.DataDir, token); err != nil {
		t.Fatal(err)
	}
	h.start(t)
	_, port, _ := net.SplitHostPort(addr)
	get := func(host string) (int, string) {
		req, err := http.NewRequest(http.MethodGet, "http://"+addr+"/metrics", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return 0, err.Error()
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(b)
	}
	testwait.For(t, "the agent's metrics listener on "+addr, func() bool {
		code, _ := get(addr)
		return code == http.StatusOK
	})
	for _, tc := range []struct {
		host string
		want int
	}{
		{addr, 200}, // the bound address
		{"localhost:" + port, 200},
		{"LOCALHOST.:" + port, 200},
		{"127.0.0.2:" + port, 200},
		{"[::1]:" + port, 200},
		{"localhost", 200},
		{"attacker.example:" + port, 421},
		{"attacker.example", 421},
		{"127.0.0.1.nip.io:" + port, 421},
		{"localhost.attacker.example:" + port, 421},
		{"10.1.2.3:" + port, 421},
		{"127.0.0.1:1", 421}, // another port: another service
	} {
		code, body := get(tc.host)
		if code != tc.want {
			t.Errorf("GET /metrics with Host %q = %d %.200s, want %d", tc.host, code, body, tc.want)
			continue
		}
		if code == 200 && !strings.Contains(body, "osm_agent_") {
			t.Errorf("GET /metrics with Host %q: no agent metrics in %.200s", tc.host, body)
		}
		if code == 421 && (!strings.Contains(body, "agent metrics listener answers only requests for localhost, 127.0.0.1, [::1]") || !strings.Contains(body, "http://127.0.0.1:"+port+"/metrics")) {
			t.Errorf("refusal %s does not name the listener, the accepted hosts and the URL to use", body)
		}
	}
}
