// Package specclient is the client of the mesh specification REST API
// (internal/spec's NewHandler), used by the osm-server CLI's apply, get,
// delete and diff: spec's documents over the one admin API client,
// internal/meshclient. It lives apart from internal/spec so that spec's
// users on the server (rendering, the catalog) link no HTTP client.
package specclient

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"

	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilienceview"
)

// Client calls the mesh specification REST API of a running osm-server
// through the admin API client, which sends the admin token and turns an
// error answer into a *meshclient.APIError; Client adds this package's
// documents and maps the answers to spec.ErrInvalid, spec.ErrConflict and
// spec.ErrNotFound.
type Client struct {
	admin *meshclient.Admin
}

// New returns a client calling the server through admin.
func New(admin *meshclient.Admin) *Client {
	return &Client{admin: admin}
}

// Apply sends files as one atomic batch.
func (c *Client) Apply(ctx context.Context, files []spec.File, dryRun bool) (spec.BatchResult, error) {
	var res spec.BatchResult
	err := c.postFiles(ctx, "/api/v1/spec/apply", url.Values{"dryRun": {fmt.Sprint(dryRun)}}, files, &res)
	return res, err
}

// Diff returns what applying files would change, with unified diffs.
func (c *Client) Diff(ctx context.Context, files []spec.File) (spec.BatchResult, error) {
	var res spec.BatchResult
	err := c.postFiles(ctx, "/api/v1/spec/diff", nil, files, &res)
	return res, err
}

// DeleteFiles deletes the documents in files as one batch.
func (c *Client) DeleteFiles(ctx context.Context, files []spec.File, dryRun bool) (spec.BatchResult, error) {
	var res spec.BatchResult
	err := c.postFiles(ctx, "/api/v1/spec/delete", url.Values{"dryRun": {fmt.Sprint(dryRun)}}, files, &res)
	return res, err
}

// Delete deletes one document; namespace is ignored for MeshConfig.
func (c *Client) Delete(ctx context.Context, kind, namespace, name string) (spec.BatchResult, error) {
	var res spec.BatchResult
	err := c.do(ctx, http.MethodDelete, objectPath(kind, namespace, name), "", nil, &res)
	return res, err
}

// List returns the documents of kind ("" or "all", "policies", "services"
// ...) as raw JSON, optionally in one namespace.
func (c *Client) List(ctx context.Context, kind, namespace string) (spec.ListBody, error) {
	p := "/api/v1/spec"
	if kind != "" {
		p += "/" + url.PathEscape(kind)
	}
	if namespace != "" {
		p += "?namespace=" + url.QueryEscape(namespace)
	}
	var body spec.ListBody
	err := c.do(ctx, http.MethodGet, p, "", nil, &body)
	return body, err
}

// Get returns one document as raw JSON.
func (c *Client) Get(ctx context.Context, kind, namespace, name string) (json.RawMessage, error) {
	var raw json.RawMessage
	err := c.do(ctx, http.MethodGet, objectPath(kind, namespace, name), "", nil, &raw)
	return raw, err
}

// Resilience returns the effective failure handling of Service
// namespace/name: what governs each caller's calls to it.
func (c *Client) Resilience(ctx context.Context, namespace, name string) (resilienceview.Service, error) {
	var out resilienceview.Service
	err := c.do(ctx, http.MethodGet, "/api/v1/spec/services/"+url.PathEscape(namespace)+"/"+url.PathEscape(name)+"/resilience", "", nil, &out)
	return out, err
}

func objectPath(kind, namespace, name string) string {
	p := "/api/v1/spec/" + url.PathEscape(kind) + "/"
	if ks, err := spec.ResolveKinds(kind); err == nil && len(ks) == 1 && ks[0] == spec.KindMeshConfig {
		return p + url.PathEscape(name)
	}
	return p + url.PathEscape(namespace) + "/" + url.PathEscape(name)
}

func (c *Client) postFiles(ctx context.Context, path string, q url.Values, files []spec.File, out any) error {
	body, err := json.Marshal(struct {
		Files []spec.File `json:"files"`
	}{files})
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	if len(q) > 0 {
		path += "?" + q.Encode()
	}
	return c.do(ctx, http.MethodPost, path, spec.FilesMediaType, body, out)
}

func (c *Client) do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	return sentinel(c.admin.Do(ctx, method, path, contentType, body, out))
}

// sentinel makes an error answer match spec.ErrInvalid (400 Invalid),
// spec.ErrConflict (409) or spec.ErrNotFound (404) as well as the *meshclient.APIError.
func sentinel(err error) error {
	var ae *meshclient.APIError
	if !errors.As(err, &ae) {
		return err
	}
	switch {
	case ae.Status == http.StatusBadRequest && ae.Body.Reason == meshapi.ReasonInvalid:
		return answerError{err, spec.ErrInvalid}
	case ae.Status == http.StatusConflict:
		return answerError{err, spec.ErrConflict}
	case ae.Status == http.StatusNotFound:
		return answerError{err, spec.ErrNotFound}
	}
	return err
}

// answerError is the server's error answer that also matches one of this
// package's sentinel errors.
type answerError struct {
	answer, is error
}

func (e answerError) Error() string   { return e.answer.Error() }
func (e answerError) Unwrap() []error { return []error{e.answer, e.is} }
