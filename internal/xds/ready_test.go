package xds

import (
	"context"
	"crypto/tls"
	"net"
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// TestReadyFollowsTheListener: Ready is an error before Serve's listener
// opens and after Serve returns, and nil while it listens, so the
// readiness probe says a client may dial xDS only when it may.
func TestReadyFollowsTheListener(t *testing.T) {
	e := startEnv(t)
	srv := NewServer(discard(), cache.New(discard()), e.certs, Options{})
	if err := srv.Ready(); err == nil || !strings.Contains(err.Error(), "not open yet") {
		t.Fatalf("Ready before Serve = %v, want the listener not open yet", err)
	}
	tlsCfg := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: e.certs.ServingCertificate([]string{"localhost", "127.0.0.1"}),
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      e.certs.CertPool(),
	}
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, "127.0.0.1:0", tlsCfg, ready) }()
	<-ready
	if err := srv.Ready(); err != nil {
		t.Errorf("Ready while listening = %v, want nil", err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if err := srv.Ready(); err == nil {
		t.Error("Ready after Serve returned = nil, want an error")
	}
}
