//go:build consulintegration && linux

package main

import (
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/store/consultest"
	"github.com/osm-vm/osm-vm/provider"
)

// TestHTTPSAndTheConnectionLimit reads 300 services from a Consul agent
// that keeps its default limit of 200 connections per client address.
// Over HTTPS the provider's blocking queries share HTTP/2 connections, so
// it reads them all; over plain HTTP each query needs its own connection,
// and the provider reports the agent's 429 with the fix.
func TestHTTPSAndTheConnectionLimit(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{{"tls", "ca", "create"}, {"tls", "cert", "create", "-server", "-dc", "dc1"}} {
		cmd := exec.Command(consultest.Binary(t), args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("consul %s: %v\n%s", strings.Join(args, " "), err, out)
		}
	}
	ca := filepath.Join(dir, "consul-agent-ca.pem")
	agent := consultest.StartDev(t, `ports { https = 8501 }`,
		fmt.Sprintf(`tls { defaults { ca_file = %q, cert_file = %q, key_file = %q, verify_incoming = false } }`,
			ca, filepath.Join(dir, "dc1-server-consul-0.pem"), filepath.Join(dir, "dc1-server-consul-0-key.pem")))
	const services = 300
	scaleCatalog{c: apiClient(t, agent, ""), services: services, instances: 1}.register(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	overTLS := startProvider(ctx, t, agent, map[string]any{
		"address": "https://" + net.JoinHostPort(agent.Host, "8501"),
		"tls":     map[string]any{"caFile": ca, "serverName": "server.dc1.consul"},
	})
	svcs, err := overTLS.ListServices(ctx)
	if err != nil || len(svcs) != services {
		t.Fatalf("over https: %d services (%v); want all %d", len(svcs), err, services)
	}
	if err := overTLS.State().Health(); err != nil {
		t.Errorf("over https: unhealthy: %v", err)
	}
	overTLS.Close() // its connections count against the same limit

	plain := startProvider(ctx, t, agent, map[string]any{})
	waitFor(t, "over http: the connection limit reported with the fix", func() string {
		err := plain.State().Health()
		if err == nil || !strings.Contains(err.Error(), "(429)") || !strings.Contains(err.Error(), "limits.http_max_conns_per_client") {
			return fmt.Sprintf("health %v", err)
		}
		return ""
	})
	if _, err := plain.ListServices(ctx); err == nil {
		t.Errorf("over http, past the limit: ListServices answered; want unavailable until a complete read")
	} else if !strings.Contains(err.Error(), provider.ErrUnavailable.Error()) {
		t.Errorf("over http, past the limit: ListServices error %v; want unavailable", err)
	}
}
