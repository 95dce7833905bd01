package testrig

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
)

// Control is a client of a backend's control endpoint.
type Control struct {
	// Addr is the endpoint's host:port (BackendOptions.Control).
	Addr string
}

// Set makes beh the backend's behaviour; it returns once it holds (the
// listeners closed for Refuse, listening again without it).
func (c Control) Set(ctx context.Context, beh Behaviour) (State, error) {
	body, err := json.Marshal(beh)
	if err != nil {
		return State{}, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, "http://"+c.Addr+"/behaviour", bytes.NewReader(body))
	if err != nil {
		return State{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	return c.do(req)
}

// State returns the backend's state.
func (c Control) State(ctx context.Context) (State, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+c.Addr+"/state", nil)
	if err != nil {
		return State{}, err
	}
	return c.do(req)
}

func (c Control) do(req *http.Request) (State, error) {
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return State{}, fmt.Errorf("backend control %s: %w", c.Addr, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, 1<<20))
	if err != nil {
		return State{}, fmt.Errorf("backend control %s: %s %s: %w", c.Addr, req.Method, req.URL.Path, err)
	}
	if resp.StatusCode != http.StatusOK {
		return State{}, fmt.Errorf("backend control %s: %s %s: %s: %s", c.Addr, req.Method, req.URL.Path, resp.Status, bytes.TrimSpace(b))
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("backend control %s: %s %s: %w", c.Addr, req.Method, req.URL.Path, err)
	}
	return s, nil
}
