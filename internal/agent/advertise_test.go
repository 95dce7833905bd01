package agent

import (
	"log/slog"
	"testing"
)

// An agent whose config sets no advertiseAddress advertises the local
// address it reaches the xDS server from (the server refuses a proxy
// without one), and a configured one wins.
func TestAdvertiseAddressDetected(t *testing.T) {
	cfg := Config{Server: "https://127.0.0.1:15443", Service: "bookstore", Namespace: "default", DataDir: t.TempDir()}.WithDefaults()
	a := newTestAgent(t, cfg)
	if got := a.ProxyConfig().AdvertiseAddress; got != "" {
		t.Errorf("before the xDS address is known: AdvertiseAddress = %q, want none", got)
	}
	a.setServers("127.0.0.9:15128", nil)
	if got, want := a.ProxyConfig().AdvertiseAddress, "127.0.0.1"; got != want {
		t.Errorf("detected AdvertiseAddress = %q, want %q", got, want)
	}
	cfg.AdvertiseAddress = "127.0.10.1"
	a = newTestAgent(t, cfg)
	a.setServers("127.0.0.9:15128", nil)
	if got, want := a.ProxyConfig().AdvertiseAddress, "127.0.10.1"; got != want {
		t.Errorf("configured AdvertiseAddress = %q, want %q", got, want)
	}
}

func newTestAgent(t *testing.T, cfg Config) *Agent {
	t.Helper()
	d, err := NewDriver(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return New(cfg, slog.New(slog.DiscardHandler), nil, d, Options{})
}
