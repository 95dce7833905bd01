package peer

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

// LFTarget is L (go-control-plane, mode snapshot or mux) or F (the
// floor), each run as `osm-bench serve-l|serve-f` in its own process.
type LFTarget struct {
	Label string
	Kind  string // serve-l or serve-f
	Mode  string // serve-l: snapshot or mux
	Self  string // the osm-bench executable
	Pin   *process.Pinning
	Dir   string // holds the server's certificates
	IDs   *IdentityCache
	LogW  io.Writer
}

func (t *LFTarget) Name() string { return t.Label }

func (t *LFTarget) Start(ctx context.Context, w workload.Workload, extra int) (*Server, error) {
	ids, err := t.IDs.Get(w, w.Proxies+extra)
	if err != nil {
		return nil, err
	}
	args := []string{t.Kind, "--dir", t.Dir, "--mode", t.Mode,
		"--services", strconv.Itoa(w.Services), "--endpoints", strconv.Itoa(w.Endpoints),
		"--proxies", strconv.Itoa(w.Proxies), "--extra", strconv.Itoa(extra),
		"--wide=" + strconv.FormatBool(w.Wide)}
	sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	path, args := t.Pin.Wrap(t.Self, args)
	proc, f, err := process.StartChild(sctx, path, args, []string{childEnv}, t.LogW, "ready")
	if err != nil {
		return nil, fmt.Errorf("%s: %w", t.Label, err)
	}
	if len(f) != 3 {
		proc.Stop()
		return nil, fmt.Errorf("%s: ready line %q: want \"ready <xds> <control>\"", t.Label, f)
	}
	control := "http://" + f[2]
	hc := &http.Client{Timeout: time.Minute}
	srv := &Server{
		Proc:      proc,
		Endpoint:  fleet.Endpoint{Addr: f[1], ServerName: "127.0.0.1", Roots: t.IDs.CA.Pool()},
		IDs:       ids,
		PprofAddr: f[2],
		Change: func(ctx context.Context, u, seq int) error {
			req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("%s/change?service=%d&seq=%d", control, u, seq), nil)
			if err != nil {
				return err
			}
			resp, err := hc.Do(req)
			if err != nil {
				return fmt.Errorf("%s: change: %w", t.Label, err)
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusNoContent {
				b, _ := io.ReadAll(resp.Body)
				return fmt.Errorf("%s: change: %s: %s", t.Label, resp.Status, b)
			}
			return nil
		},
		Close: proc.Stop,
	}
	srv.Restart = func(ctx context.Context) (*process.Child, string, error) {
		srv.Proc.Stop()
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		proc, f, err := process.StartChild(sctx, path, args, []string{childEnv}, t.LogW, "ready")
		if err != nil {
			return nil, "", fmt.Errorf("%s after a restart: %w", t.Label, err)
		}
		if len(f) != 3 {
			proc.Stop()
			return nil, "", fmt.Errorf("%s after a restart: ready line %q: want \"ready <xds> <control>\"", t.Label, f)
		}
		control, srv.PprofAddr = "http://"+f[2], f[2]
		return proc, f[1], nil
	}
	return srv, nil
}

// IdentityCache mints the fleet's certificates once and shares them
// between L and F (a workload's proxy p has the same CN for both).
type IdentityCache struct {
	CA *pki.CA
	mu sync.Mutex
	m  map[string][]fleet.Identity
}

func (c *IdentityCache) Get(w workload.Workload, n int) ([]fleet.Identity, error) {
	key := fmt.Sprintf("%d/%d/%t/%d", w.Services, w.Proxies, w.Wide, n)
	c.mu.Lock()
	defer c.mu.Unlock()
	if ids, ok := c.m[key]; ok {
		return ids, nil
	}
	ids, err := fleet.MintIdentities(c.CA, w, n)
	if err != nil {
		return nil, err
	}
	if c.m == nil {
		c.m = map[string][]fleet.Identity{}
	}
	c.m[key] = ids
	return ids, nil
}

// Server is one running server under test, whichever kind.
type Server struct {
	Proc     *process.Child
	Endpoint fleet.Endpoint
	IDs      []fleet.Identity // the fleet's identities, then the joiners'
	// change moves endpoint 0 of service u to ChangedAddr(seq) and returns
	// once the server has been told (the measured clock starts before it).
	Change func(ctx context.Context, u, seq int) error
	// prepare, when set, readies that change before the clock starts (O:
	// writes the new endpoints file that change renames into place).
	Prepare func(u, seq int) error
	// Apply applies a spec document through the server's API (O only:
	// nil for the peers, which have no policies).
	Apply func(ctx context.Context, doc string) error
	Close func()
	// restart stops the server process and starts it again on the same
	// state (O: its data directory; L and F: the workload), waits until it
	// serves xDS and returns the new process and xDS address (O keeps its
	// ports; L and F listen on new ones: a proxy's TLS session is kept by
	// Server name, not address).
	Restart func(ctx context.Context) (*process.Child, string, error)
	// debugAddr is O's debug HTTP address (pprof), "" for the others;
	// debugToken the admin token its /debug/ routes need.
	DebugAddr, DebugToken string
	// pprofAddr serves /debug/pprof/profile (with debugToken): O's debug
	// address, L's and F's control address.
	PprofAddr string
}
