package enroll

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// CreateTokenBody is the body of POST /api/v1/tokens.
type CreateTokenBody struct {
	Service        mesh.MeshService `json:"service"`
	ServiceAccount string           `json:"serviceAccount,omitempty"`
	// TTL is a Go duration such as "24h"; empty means DefaultTokenTTL.
	TTL  string `json:"ttl,omitempty"`
	Uses int    `json:"uses,omitempty"`
}

// CreatedToken is the answer to POST /api/v1/tokens: the secret, shown
// this once, and the record.
type CreatedToken struct {
	Secret string `json:"secret"`
	Token  Token  `json:"token"`
}

// TokenStatus is a token with its state as the server sees it now.
type TokenStatus struct {
	Token
	State string `json:"state"`
}

// TokenList is the answer to GET /api/v1/tokens.
type TokenList struct {
	Items []TokenStatus `json:"items"`
}

// NewTokenAdminHandler returns the join token admin API. It does no
// authentication: mount it behind the admin-token middleware.
//
//	POST   /api/v1/tokens       CreateTokenBody -> 201 CreatedToken
//	GET    /api/v1/tokens       -> TokenList, newest first
//	DELETE /api/v1/tokens/{id}  revoke -> Token (404 when unknown)
func NewTokenAdminHandler(log *slog.Logger, tokens *Tokens) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /api/v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		var body CreateTokenBody
		if !decode(w, r, &body) {
			return
		}
		req := TokenRequest{Service: body.Service, ServiceAccount: body.ServiceAccount, Uses: body.Uses}
		if body.TTL != "" {
			ttl, err := time.ParseDuration(body.TTL)
			if err != nil {
				writeError(w, http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("ttl %q: want a duration such as 24h or 30m", body.TTL))
				return
			}
			if ttl <= 0 {
				writeError(w, http.StatusBadRequest, ReasonBadRequest, fmt.Sprintf("ttl %q: want a positive duration such as 24h", body.TTL))
				return
			}
			req.TTL = ttl
		}
		secret, tok, err := tokens.Create(r.Context(), req)
		if errors.Is(err, ErrTokenInvalid) {
			writeError(w, http.StatusBadRequest, ReasonBadRequest, err.Error())
			return
		}
		if err != nil {
			log.Error("create join token", "error", err)
			writeError(w, http.StatusInternalServerError, ReasonInternal, err.Error())
			return
		}
		log.Info("join token created", "token", tok.ID, "service", tok.Service.String(), "expires", tok.Expires, "uses", tok.UsesTotal)
		writeJSON(w, http.StatusCreated, CreatedToken{Secret: secret, Token: tok})
	})
	mux.HandleFunc("GET /api/v1/tokens", func(w http.ResponseWriter, r *http.Request) {
		toks, err := tokens.List(r.Context())
		if err != nil {
			log.Error("list join tokens", "error", err)
			writeError(w, http.StatusInternalServerError, ReasonInternal, err.Error())
			return
		}
		now := tokens.now()
		list := TokenList{Items: make([]TokenStatus, 0, len(toks))}
		for _, t := range toks {
			list.Items = append(list.Items, TokenStatus{Token: t, State: t.State(now)})
		}
		writeJSON(w, http.StatusOK, list)
	})
	mux.HandleFunc("DELETE /api/v1/tokens/{id}", func(w http.ResponseWriter, r *http.Request) {
		tok, err := tokens.Revoke(r.Context(), r.PathValue("id"))
		if errors.Is(err, ErrTokenNotFound) {
			writeError(w, http.StatusNotFound, ReasonNotFound, err.Error())
			return
		}
		if err != nil {
			log.Error("revoke join token", "error", err)
			writeError(w, http.StatusInternalServerError, ReasonInternal, err.Error())
			return
		}
		log.Info("join token revoked", "token", tok.ID)
		writeJSON(w, http.StatusOK, tok)
	})
	return mux
}

// JoinCommand returns the command an operator pastes on a machine to
// enroll it with a token.
func JoinCommand(serverURL, secret, caHash string, svc mesh.MeshService) string {
	return fmt.Sprintf("osm-agent enroll --server %s --token %s --ca-cert-hash %s --service %s --namespace %s",
		serverURL, secret, caHash, svc.Name, svc.Namespace)
}

// APIError is an error response of the enrollment or token API.
type APIError struct {
	Status int
	Body   ErrorBody
	// RetryAfter is the server's Retry-After (in seconds), 0 if none.
	RetryAfter time.Duration
}

func (e *APIError) Error() string {
	if e.Body.Error == "" {
		return fmt.Sprintf("server answered %d %s", e.Status, http.StatusText(e.Status))
	}
	return e.Body.Error
}

// Unwrap maps a 404 NotFound of the token API to ErrTokenNotFound.
func (e *APIError) Unwrap() error {
	if e.Status == http.StatusNotFound && e.Body.Reason == ReasonNotFound {
		return ErrTokenNotFound
	}
	return nil
}

// RenewalTooEarly reports whether err is the server's refusal of a
// renewal that came too early, and how long to wait before renewing again.
// The certificate presented stays valid meanwhile.
func RenewalTooEarly(err error) (retryIn time.Duration, ok bool) {
	var apiErr *APIError
	if !errors.As(err, &apiErr) || apiErr.Status != http.StatusTooManyRequests || apiErr.Body.Reason != ReasonRenewalTooEarly {
		return 0, false
	}
	return max(apiErr.RetryAfter, time.Second), true
}

// TokenAdminClient calls the token admin API of a running osm-server.
type TokenAdminClient struct {
	base  string
	hc    *http.Client
	token string
}

// NewTokenAdminClient returns a client for the server at baseURL (such as
// https://127.0.0.1:15443) sending adminToken as a bearer token. hc carries
// the TLS configuration that trusts the server; nil means
// http.DefaultClient.
func NewTokenAdminClient(baseURL string, hc *http.Client, adminToken string) *TokenAdminClient {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &TokenAdminClient{base: strings.TrimSuffix(baseURL, "/"), hc: hc, token: adminToken}
}

// Create asks for a new join token and returns its secret and record.
func (c *TokenAdminClient) Create(ctx context.Context, req TokenRequest) (string, Token, error) {
	body := CreateTokenBody{Service: req.Service, ServiceAccount: req.ServiceAccount, Uses: req.Uses}
	if req.TTL != 0 {
		body.TTL = req.TTL.String()
	}
	var out CreatedToken
	if err := c.do(ctx, http.MethodPost, "/api/v1/tokens", body, &out); err != nil {
		return "", Token{}, err
	}
	return out.Secret, out.Token, nil
}

// List returns every token with its state.
func (c *TokenAdminClient) List(ctx context.Context) ([]TokenStatus, error) {
	var out TokenList
	if err := c.do(ctx, http.MethodGet, "/api/v1/tokens", nil, &out); err != nil {
		return nil, err
	}
	return out.Items, nil
}

// Revoke revokes the token with the ID.
func (c *TokenAdminClient) Revoke(ctx context.Context, id string) (Token, error) {
	var out Token
	err := c.do(ctx, http.MethodDelete, "/api/v1/tokens/"+url.PathEscape(id), nil, &out)
	return out, err
}

func (c *TokenAdminClient) do(ctx context.Context, method, path string, in, out any) error {
	var body io.Reader
	if in != nil {
		b, err := json.Marshal(in)
		if err != nil {
			return fmt.Errorf("encode request: %w", err)
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, body)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, path, err)
	}
	if in != nil {
		req.Header.Set("Content-Type", "application/json")
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

// roundTrip sends req and decodes a 2xx JSON answer into out, or returns
// an *APIError.
func roundTrip(hc *http.Client, req *http.Request, out any) error {
	resp, err := hc.Do(req)
	if err != nil {
		var ue *url.Error
		if errors.As(err, &ue) {
			return ue.Err // callers name the server; the method and URL add nothing
		}
		return err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("%s %s: read answer: %w", req.Method, req.URL.Redacted(), err)
	}
	if resp.StatusCode/100 != 2 {
		apiErr := &APIError{Status: resp.StatusCode}
		if secs, err := strconv.ParseUint(resp.Header.Get("Retry-After"), 10, 32); err == nil {
			apiErr.RetryAfter = time.Duration(secs) * time.Second
		}
		if json.Unmarshal(raw, &apiErr.Body) != nil || apiErr.Body.Error == "" {
			apiErr.Body.Error = fmt.Sprintf("%s %s: server answered %s: %q", req.Method, req.URL.Redacted(), resp.Status, bytes.TrimSpace(truncate(raw, 200)))
		}
		return apiErr
	}
	if err := json.Unmarshal(raw, out); err != nil {
		return fmt.Errorf("%s %s: decode answer: %w", req.Method, req.URL.Redacted(), err)
	}
	return nil
}

func truncate(b []byte, n int) []byte {
	if len(b) > n {
		return b[:n]
	}
	return b
}
