package spec

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// Client calls the mesh specification REST API of a running osm-server.
type Client struct {
	base  string
	hc    *http.Client
	token string
}

// NewClient returns a client for the server at baseURL (such as
// https://127.0.0.1:15443), sending token as a bearer token. hc carries the
// TLS configuration that trusts the server.
func NewClient(baseURL string, hc *http.Client, token string) *Client {
	if hc == nil {
		hc = http.DefaultClient
	}
	return &Client{base: strings.TrimSuffix(baseURL, "/"), hc: hc, token: token}
}

// APIError is an error response of the server.
type APIError struct {
	Status int
	Body   ErrorBody
}

func (e *APIError) Error() string {
	if len(e.Body.Errors) == 0 {
		return e.Body.Error
	}
	var b strings.Builder
	b.WriteString(e.Body.Error)
	for _, fe := range e.Body.Errors {
		b.WriteString("\n  " + fe.Error())
	}
	return b.String()
}

// Unwrap maps the status to ErrInvalid, ErrConflict or ErrNotFound.
func (e *APIError) Unwrap() error {
	switch e.Status {
	case http.StatusBadRequest:
		if e.Body.Reason == "Invalid" {
			return ErrInvalid
		}
	case http.StatusConflict:
		return ErrConflict
	case http.StatusNotFound:
		return ErrNotFound
	}
	return nil
}

// Apply sends files as one atomic batch.
func (c *Client) Apply(ctx context.Context, files []File, dryRun bool) (BatchResult, error) {
	var res BatchResult
	err := c.postFiles(ctx, "/api/v1/spec/apply", url.Values{"dryRun": {fmt.Sprint(dryRun)}}, files, &res)
	return res, err
}

// Diff returns what applying files would change, with unified diffs.
func (c *Client) Diff(ctx context.Context, files []File) (BatchResult, error) {
	var res BatchResult
	err := c.postFiles(ctx, "/api/v1/spec/diff", nil, files, &res)
	return res, err
}

// DeleteFiles deletes the documents in files as one batch.
func (c *Client) DeleteFiles(ctx context.Context, files []File, dryRun bool) (BatchResult, error) {
	var res BatchResult
	err := c.postFiles(ctx, "/api/v1/spec/delete", url.Values{"dryRun": {fmt.Sprint(dryRun)}}, files, &res)
	return res, err
}

// Delete deletes one document; namespace is ignored for MeshConfig.
func (c *Client) Delete(ctx context.Context, kind, namespace, name string) (BatchResult, error) {
	var res BatchResult
	err := c.do(ctx, http.MethodDelete, objectPath(kind, namespace, name), "", nil, &res)
	return res, err
}

// List returns the documents of kind ("" or "all", "policies", "services"
// ...) as raw JSON, optionally in one namespace.
func (c *Client) List(ctx context.Context, kind, namespace string) (ListBody, error) {
	p := "/api/v1/spec"
	if kind != "" {
		p += "/" + url.PathEscape(kind)
	}
	if namespace != "" {
		p += "?namespace=" + url.QueryEscape(namespace)
	}
	var body ListBody
	err := c.do(ctx, http.MethodGet, p, "", nil, &body)
	return body, err
}

// Get returns one document as raw JSON.
func (c *Client) Get(ctx context.Context, kind, namespace, name string) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, objectPath(kind, namespace, name), "", nil, &raw)
	return raw, err
}

func objectPath(kind, namespace, name string) string {
	p := "/api/v1/spec/" + url.PathEscape(kind) + "/"
	if ks, err := ResolveKinds(kind); err == nil && len(ks) == 1 && ks[0] == KindMeshConfig {
		return p + url.PathEscape(name)
	}
	return p + url.PathEscape(namespace) + "/" + url.PathEscape(name)
}

func (c *Client) postFiles(ctx context.Context, path string, q url.Values, files []File, out any) error {
	body, err := json.Marshal(filesBody{Files: files})
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return c.do(ctx, http.MethodPost, path, FilesMediaType, body, out)
}

func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, c.base+path, bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("build request %s %s: %w", method, path, err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	if c.token != "" {
		req.Header.Set("Authorization", "Bearer "+c.token)
	}
	resp, err := c.hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s %s: %w", method, c.base+path, err)
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, 64<<20))
	if err != nil {
		return fmt.Errorf("read response of %s %s: %w", method, path, err)
	}
	if resp.StatusCode != http.StatusOK {
		ae := &APIError{Status: resp.StatusCode}
		if err := json.Unmarshal(data, &ae.Body); err != nil || ae.Body.Error == "" {
			ae.Body.Error = fmt.Sprintf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(data)))
		}
		return ae
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("decode response of %s %s: %w", method, path, err)
	}
	return nil
}
