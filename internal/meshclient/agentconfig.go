package meshclient

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// FetchAgentConfig reads the agent config (GET /api/v1/agent/config) over
// mTLS with the proxy certificate; the server must present a certificate
// caPEM verifies.
func FetchAgentConfig(ctx context.Context, server string, caPEM []byte, cert tls.Certificate) (meshapi.AgentConfig, error) {
	u, err := url.Parse(server)
	if err != nil {
		return meshapi.AgentConfig{}, fmt.Errorf("server %q: %w", server, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return meshapi.AgentConfig{}, errors.New("agent config: ca.crt holds no PEM certificate")
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
	}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: defaultTimeout}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u.JoinPath("/api/v1/agent/config").String(), nil)
	if err != nil {
		return meshapi.AgentConfig{}, err
	}
	var ac meshapi.AgentConfig
	if err := roundTrip(hc, req, &ac); err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			return meshapi.AgentConfig{}, fmt.Errorf("agent config: server answered %d %s: %w", apiErr.Status, http.StatusText(apiErr.Status), err)
		}
		return meshapi.AgentConfig{}, fmt.Errorf("agent config: %w", err)
	}
	return ac, nil
}
