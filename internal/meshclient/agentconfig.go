package meshclient

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// FetchAgentConfig reads the agent config (GET /api/v1/agent/config) over
// mTLS with the proxy certificate; the server must present a certificate
// caPEM verifies.
func FetchAgentConfig(ctx context.Context, server string, caPEM []byte, cert tls.Certificate) (meshapi.AgentConfig, error) {
	var ac meshapi.AgentConfig
	if err := agentCall(ctx, server, caPEM, cert, http.MethodGet, "/api/v1/agent/config", nil, &ac); err != nil {
		return meshapi.AgentConfig{}, fmt.Errorf("agent config: %w", err)
	}
	return ac, nil
}

// SendGatewayReport sends what a gateway machine's agent found of its
// certificate files (POST /api/v1/agent/gateway-report), as
// FetchAgentConfig authenticates.
func SendGatewayReport(ctx context.Context, server string, caPEM []byte, cert tls.Certificate, r meshapi.GatewayReport) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := agentCall(ctx, server, caPEM, cert, http.MethodPost, "/api/v1/agent/gateway-report", bytes.NewReader(body), nil); err != nil {
		return fmt.Errorf("gateway report: %w", err)
	}
	return nil
}

// SendEjectionReport sends the backends the agent's Envoy has ejected
// (POST /api/v1/agent/ejections), as FetchAgentConfig authenticates.
func SendEjectionReport(ctx context.Context, server string, caPEM []byte, cert tls.Certificate, r meshapi.EjectionReport) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	if err := agentCall(ctx, server, caPEM, cert, http.MethodPost, "/api/v1/agent/ejections", bytes.NewReader(body), nil); err != nil {
		return fmt.Errorf("ejection report: %w", err)
	}
	return nil
}

// agentCall makes one request of the agent API over mTLS with the proxy
// certificate and decodes the answer into out (unless nil).
func agentCall(ctx context.Context, server string, caPEM []byte, cert tls.Certificate, method, path string, body io.Reader, out any) error {
	u, err := url.Parse(server)
	if err != nil {
		return fmt.Errorf("server %q: %w", server, err)
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return errors.New("ca.crt holds no PEM certificate")
	}
	verify, err := verifyControlPlane(cert)
	if err != nil {
		return err
	}
	tr := &http.Transport{TLSClientConfig: &tls.Config{
		RootCAs: pool, Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12,
		VerifyConnection: verify,
	}}
	defer tr.CloseIdleConnections()
	hc := &http.Client{Transport: tr, Timeout: defaultTimeout}
	req, err := http.NewRequestWithContext(ctx, method, u.JoinPath(path).String(), body)
	if err != nil {
		return err
	}
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if err := roundTrip(hc, req, out); err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			return fmt.Errorf("server answered %d %s: %w", apiErr.Status, http.StatusText(apiErr.Status), err)
		}
		return err
	}
	return nil
}
