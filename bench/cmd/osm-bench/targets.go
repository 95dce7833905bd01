package main

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/bench/fleet"
	"github.com/osm-vm/osm-vm/bench/pki"
	"github.com/osm-vm/osm-vm/bench/process"
	"github.com/osm-vm/osm-vm/bench/workload"
)

// childEnv marks a process the harness started as one of its servers, so
// that a test binary standing in for osm-bench runs the subcommand.
const childEnv = "OSM_BENCH_CHILD=1"

// benchTarget is L (go-control-plane, mode snapshot or mux) or F (the
// floor), each run as `osm-bench serve-l|serve-f` in its own process.
type benchTarget struct {
	name string
	kind string // serve-l or serve-f
	mode string // serve-l: snapshot or mux
	self string // the osm-bench executable
	pin  *process.Pinning
	dir  string // holds the server's certificates
	ids  *identityCache
	logw io.Writer
}

func (t *benchTarget) Name() string { return t.name }

func (t *benchTarget) Start(ctx context.Context, w workload.Workload, extra int) (*server, error) {
	ids, err := t.ids.get(w, w.Proxies+extra)
	if err != nil {
		return nil, err
	}
	args := []string{t.kind, "--dir", t.dir, "--mode", t.mode,
		"--services", strconv.Itoa(w.Services), "--endpoints", strconv.Itoa(w.Endpoints),
		"--proxies", strconv.Itoa(w.Proxies), "--extra", strconv.Itoa(extra),
		"--wide=" + strconv.FormatBool(w.Wide)}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	path, args := t.pin.Wrap(t.self, args)
	proc, f, err := process.StartChild(sctx, path, args, []string{childEnv}, t.logw, "ready")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.name, err)
	}
	if len(f) != 3 {
		proc.Stop()
		return nil, fmt.Errorf("%s: ready line %q: want \"ready <xds> <control>\"", t.name, f)
	}
	control := "http://" + f[2]
	hc := &http.Client{Timeout: time.Minute}
	srv := &server{
		proc:      proc,
		Endpoint:  fleet.Endpoint{Addr: f[1], ServerName: "127.0.0.1", Roots: t.ids.ca.Pool()},
		ids:       ids,
		pprofAddr: f[2],
		change: func(ctx context.Context, u, seq int) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/change?service=%d&seq=%d", control, u, seq), nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return fmt.Errorf("%s: change: %w", t.name, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				b, _ := io.ReadAll(resp.Body)
				return fmt.Errorf("%s: change: %s: %s", t.name, resp.Status, b)
			}
			return nil
		},
		close: proc.Stop,
	}
	srv.restart = func(ctx context.Context) (*process.Child, string, error) {
		srv.proc.Stop()
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		proc, f, err := process.StartChild(sctx, path, args, []string{childEnv}, t.logw, "ready")
		if err != nil {
			return nil, "", fmt.Errorf("%s after a restart: %w", t.name, err)
		}
		if len(f) != 3 {
			proc.Stop()
			return nil, "", fmt.Errorf("%s after a restart: ready line %q: want \"ready <xds> <control>\"", t.name, f)
		}
		control, srv.pprofAddr = "http://"+f[2], f[2]
		return proc, f[1], nil
	}
	return srv, nil
}

// identityCache mints the fleet's certificates once and shares them
// between L and F (a workload's proxy p has the same CN for both).
type identityCache struct {
	ca *pki.CA
	mu sync.Mutex
	m  map[string][]fleet.Identity
}

func (c *identityCache) get(w workload.Workload, n int) ([]fleet.Identity, error) {
	key := fmt.Sprintf("%d/%d/%t/%d", w.Services, w.Proxies, w.Wide, n)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ids, ok := c.m[key]; ok {
		return ids, nil
	}
	ids, err := fleet.MintIdentities(c.ca, w, n)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string][]fleet.Identity{}
	}
	c.m[key] = ids
	return ids, nil
}
