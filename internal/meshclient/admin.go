package meshclient

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// Admin calls the admin API of a running osm-server with the admin token:
// join tokens, proxies, the CA and (through [Admin.Do], used by
// internal/spec's Client) the mesh specification.
type Admin struct {
	base  string
	hc    *http.Client
	token string
}

// NewAdmin returns a client for the server at baseURL (such as
// https://127.0.0.1:15443) sending adminToken as a bearer token. hc carries
// the TLS configuration that trusts the server; nil means
// http.DefaultClient.
func NewAdmin(baseURL string, hc *http.Client, adminToken string) *Admin {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Admin{base: strings.TrimSuffix(baseURL, "/"), hc: hc, token: adminToken}
}

// Do sends body (of contentType; none when empty) to path with the admin
// token and decodes a 2xx JSON answer into out when out is not nil. An
// error answer is an *APIError.
func (c *Admin) Do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	var rd io.Reader
	if body != nil {
		rd = bytes.NewReader(body)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, rd)
	if err != nil {
		return fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	if err := roundTrip(c.hc, req, out); err != nil {
		var apiErr *APIError
		if errors.As(err, &apiErr) {
			return err
		}
		return fmt.Errorf("%s %s: %w", method, c.base+path, err)
	}
	return nil
}

func (c *Admin) doJSON(ctx context.Context, method, path string, in, out any) error {
	if in == nil {
		return c.Do(ctx, method, path, "", nil, out)
	}
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	return c.Do(ctx, method, path, "application/json", b, out)
}

// CA returns the mesh root and its hash for --ca-cert-hash.
func (c *Admin) CA(ctx context.Context) (meshapi.CAInfo, error) {
	var out meshapi.CAInfo
	err := c.doJSON(ctx, http.MethodGet, "/api/v1/ca", nil, &out)
	return out, err
}

// CreateToken asks for a new join token and returns its secret (shown
// this once) and record.
func (c *Admin) CreateToken(ctx context.Context, req meshapi.CreateTokenRequest) (meshapi.CreatedToken, error) {
	var out meshapi.CreatedToken
	err := c.doJSON(ctx, http.MethodPost, "/api/v1/tokens", req, &out)
	return out, err
}

// ListTokens returns every join token with its state, newest first.
func (c *Admin) ListTokens(ctx context.Context) ([]meshapi.TokenStatus, error) {
	var out meshapi.TokenList
	if err := c.doJSON(ctx, http.MethodGet, "/api/v1/tokens", nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// RevokeToken revokes the join token with the ID; an unknown ID is an
// error that matches ErrNotFound.
func (c *Admin) RevokeToken(ctx context.Context, id string) (meshapi.Token, error) {
	var out meshapi.Token
	err := c.doJSON(ctx, http.MethodDelete, "/api/v1/tokens/"+url.PathEscape(id), nil, &out)
	return out, err
}

// ListProxies returns every enrolled proxy.
func (c *Admin) ListProxies(ctx context.Context) ([]meshapi.Proxy, error) {
	var out meshapi.ProxyList
	if err := c.doJSON(ctx, http.MethodGet, "/api/v1/proxies", nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// RevokeProxy revokes the proxy with the certificate CN; an unknown CN is
// an error that matches ErrNotFound.
func (c *Admin) RevokeProxy(ctx context.Context, cn string) error {
	return c.doJSON(ctx, http.MethodPost, "/api/v1/proxies/"+url.PathEscape(cn)+"/revoke", nil, nil)
}
