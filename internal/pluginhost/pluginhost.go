// Package pluginhost starts, supervises and restarts the endpoints-provider
// plugins named in the server configuration, and feeds what they report
// into the catalog.
//
// Each provider instance runs its plugin executable from the plugin
// directory over hashicorp/go-plugin (gRPC only, AutoMTLS). The host
// configures it, subscribes to its Watch stream, lists its services, and
// health-checks it. When a plugin dies, hangs or its stream breaks, the host
// keeps the instance's last endpoints in the catalog (marked stale in the
// status), and starts a new process with capped exponential backoff. A
// plugin's stderr is re-logged under the instance's name.
//
// pluginhost imports internal/mesh and the public provider SDK; it reaches
// the catalog only through the small Sink interface it declares.
package pluginhost

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/hashicorp/go-plugin"
	"google.golang.org/grpc/health/grpc_health_v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/provider"
)

// Sink receives what providers report. catalog.Catalog implements it.
type Sink interface {
	SetEndpoints(provider string, svc mesh.MeshService, eps []mesh.Endpoint)
	DeleteService(provider string, svc mesh.MeshService)
	ReplaceProvider(provider string, all map[mesh.MeshService][]mesh.Endpoint)
}

// Instance is one configured provider instance.
type Instance struct {
	// Name is the unique instance name; endpoints carry it as their provider.
	Name string
	// Plugin is the executable's file name in the plugin directory.
	Plugin string
	// SHA256 optionally pins the executable's hex SHA-256.
	SHA256 string
	// Config is the instance's config block as JSON.
	Config []byte
}

// Options configure a Host. Zero durations take the defaults shown.
type Options struct {
	PluginDir string
	Instances []Instance
	// MinBackoff is the first restart delay (500ms); it doubles per failed
	// start up to MaxBackoff (30s) and resets after a minute of good running.
	MinBackoff, MaxBackoff time.Duration
	// HealthInterval (250ms) paces the health checks, one at a time and
	// off the loop that applies events. An answer later than HealthTimeout
	// (750ms) is logged; a plugin that has answered none for HangTimeout
	// (15s) hangs and is killed. The bound is a time without an answer, not
	// a count of late ones: a server busy with a reconnect storm of
	// thousands of TLS handshakes on two cores reads a healthy plugin's
	// answer seconds late, and killing the plugin then costs a restart, a
	// relist and stale endpoints for nothing.
	HealthInterval, HealthTimeout, HangTimeout time.Duration
	// CallTimeout bounds Describe, Configure and List calls (30s).
	CallTimeout time.Duration
	// Resync is how often the host re-lists a running provider as a safety
	// net against lost events (5m).
	Resync time.Duration
}

func (o *Options) defaults() {
	set := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	set(&o.MinBackoff, 500*time.Millisecond)
	set(&o.MaxBackoff, 30*time.Second)
	set(&o.HealthInterval, 250*time.Millisecond)
	set(&o.HealthTimeout, 750*time.Millisecond)
	set(&o.HangTimeout, 15*time.Second)
	set(&o.CallTimeout, 30*time.Second)
	set(&o.Resync, 5*time.Minute)
}

// Host supervises every provider instance.
type Host struct {
	opts      Options
	sink      Sink
	log       *slog.Logger
	instances []*instance
	// listed is closed once every instance has sent its first list.
	listed     chan struct{}
	listedOnce sync.Once
}

// New returns a host for opts.Instances. Nothing starts before Run.
func New(log *slog.Logger, opts Options, sink Sink) *Host {
	opts.defaults()
	h := &Host{opts: opts, sink: sink, log: log, listed: make(chan struct{})}
	for _, in := range opts.Instances {
		h.instances = append(h.instances, &instance{
			Instance: in,
			known:    map[mesh.MeshService]struct{}{},
			log:      log.With("provider", in.Name),
			status:   Status{Name: in.Name, Plugin: in.Plugin, State: StateStarting},
		})
	}
	h.noteListed()
	return h
}

// Listed returns a channel closed once every instance has sent its first
// list (at once with none): Waiting is then empty for good.
func (h *Host) Listed() <-chan struct{} { return h.listed }

// noteListed closes listed when no instance is waiting any more.
func (h *Host) noteListed() {
	if len(h.Waiting()) == 0 {
		h.listedOnce.Do(func() { close(h.listed) })
	}
}

// Run supervises every instance until ctx is done, then stops the plugins
// and returns nil once they have exited.
func (h *Host) Run(ctx context.Context) error {
	var wg sync.WaitGroup
	for _, in := range h.instances {
		wg.Go(func() { h.supervise(ctx, in) })
	}
	wg.Wait()
	return nil
}

// Waiting returns the names of the instances that have not sent their
// first list yet, in configuration order (none once every one has).
func (h *Host) Waiting() []string {
	var out []string
	for _, in := range h.instances {
		if st := in.snapshot(); st.LastSync.IsZero() {
			out = append(out, st.Name)
		}
	}
	return out
}

// Status returns every instance's status, in configuration order.
func (h *Host) Status() []Status {
	out := make([]Status, len(h.instances))
	for i, in := range h.instances {
		out[i] = in.snapshot()
	}
	return out
}

// States of a provider instance.
const (
	// StateStarting: the plugin has not completed its first list yet.
	StateStarting = "starting"
	// StateRunning: the plugin is up and reports itself healthy.
	StateRunning = "running"
	// StateUnhealthy: the plugin is up but reports a problem (for example a
	// malformed source file); its last good endpoints stay in force.
	StateUnhealthy = "unhealthy"
	// StateRestarting: the plugin process is gone; its last endpoints are
	// served as stale until it is back.
	StateRestarting = "restarting"
)

// Status is what the debug API shows about a provider instance.
type Status struct {
	Name          string     `json:"name"`
	Plugin        string     `json:"plugin"`
	PluginVersion string     `json:"pluginVersion,omitempty"`
	State         string     `json:"state"`
	PID           int        `json:"pid,omitempty"`
	Restarts      int        `json:"restarts"`
	LastError     string     `json:"lastError,omitempty"`
	LastErrorTime *time.Time `json:"lastErrorTime,omitempty"`
	// StaleSince is set while the endpoints served for this instance are the
	// last ones seen before its plugin went away.
	StaleSince *time.Time `json:"staleSince,omitempty"`
	LastSync   time.Time  `json:"lastSync"`
	Services   int        `json:"services"`
}

type instance struct {
	Instance
	log *slog.Logger

	mu     sync.Mutex
	status Status
	known  map[mesh.MeshService]struct{} // services reported, for Status.Services
}

func (in *instance) snapshot() Status {
	in.mu.Lock()
	defer in.mu.Unlock()
	return in.status
}

func (in *instance) update(fn func(*Status)) {
	in.mu.Lock()
	defer in.mu.Unlock()
	fn(&in.status)
}

func (in *instance) recordError(err error) {
	now := time.Now()
	in.update(func(s *Status) {
		s.LastError = err.Error()
		s.LastErrorTime = &now
	})
}

// supervise runs the instance's plugin, restarting it with backoff, until
// ctx is done.
func (h *Host) supervise(ctx context.Context, in *instance) {
	backoff := h.opts.MinBackoff
	for {
		started := time.Now()
		err := h.runOnce(ctx, in)
		if ctx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("plugin stopped without an error")
		}
		now := time.Now()
		in.update(func(s *Status) {
			s.State = StateRestarting
			s.PID = 0
			if s.StaleSince == nil && !s.LastSync.IsZero() {
				s.StaleSince = &now
			}
		})
		in.recordError(err)
		if time.Since(started) > time.Minute {
			backoff = h.opts.MinBackoff
		}
		in.log.Error("provider plugin failed; keeping its last endpoints and restarting", "error", err, "retry_in", backoff)
		select {
		case <-ctx.Done():
			return
		case <-time.After(backoff):
		}
		backoff = min(2*backoff, h.opts.MaxBackoff)
		in.update(func(s *Status) { s.Restarts++ })
	}
}

// runOnce starts the plugin, syncs it and follows it until it fails or ctx
// is done. The plugin process has exited when it returns.
func (h *Host) runOnce(ctx context.Context, in *instance) error {
	path := filepath.Join(h.opts.PluginDir, in.Plugin)
	secure, err := checkExecutable(path, in.SHA256)
	if err != nil {
		return err
	}
	cmd := exec.Command(path)
	setParentDeathSignal(cmd)
	cfg := provider.ClientConfig(cmd)
	cfg.SecureConfig = secure
	cfg.Stderr = &stderrRelogger{log: in.log}
	cfg.Logger = hclog.New(&hclog.LoggerOptions{
		Name:       "go-plugin",
		Level:      hclog.Error,
		JSONFormat: true,
		Output:     &stderrRelogger{log: in.log.With("component", "go-plugin")},
	})
	client := plugin.NewClient(cfg)
	defer stop(client, cmd)

	p, err := provider.Dispense(client)
	if err != nil {
		return fmt.Errorf("start plugin %s: %w", path, err)
	}
	rpc, err := client.Client()
	if err != nil {
		return fmt.Errorf("start plugin %s: %w", path, err)
	}
	grpcClient, ok := rpc.(*plugin.GRPCClient)
	if !ok {
		return fmt.Errorf("plugin %s did not start over gRPC", path)
	}
	health := grpc_health_v1.NewHealthClient(grpcClient.Conn)
	if cmd.Process != nil {
		in.update(func(s *Status) { s.PID = cmd.Process.Pid })
	}

	callCtx, cancel := context.WithTimeout(ctx, h.opts.CallTimeout)
	info, err := p.Describe(callCtx)
	cancel()
	if err != nil {
		return fmt.Errorf("describe: %w", err)
	}
	in.update(func(s *Status) { s.PluginVersion = info.Version })

	callCtx, cancel = context.WithTimeout(ctx, h.opts.CallTimeout)
	err = p.Configure(callCtx, in.Name, in.Config)
	cancel()
	if err != nil {
		return fmt.Errorf("configure (fix the `config` of provider %q in the server config): %w", in.Name, err)
	}

	// Subscribe before listing so no change falls between the two. Events
	// that arrive during the list wait in the channel and are applied after
	// it; each carries a service's full state, so the newest wins.
	events := make(chan received, 256)
	watchCtx, stopWatch := context.WithCancel(ctx)
	watchDone := make(chan error, 1)
	go func() {
		watchDone <- p.Watch(watchCtx, func(ev provider.Event) error {
			select {
			case events <- received{ev, time.Now()}:
				return nil
			case <-watchCtx.Done():
				return watchCtx.Err()
			}
		})
	}()
	defer func() {
		stopWatch()
		<-watchDone
	}()

	// A backend that is not reachable yet (ErrUnavailable) is no reason to
	// kill the plugin: keep the previous endpoints and retry the list.
	for delay := h.opts.MinBackoff; ; delay = min(2*delay, h.opts.MaxBackoff) {
		err := h.resync(ctx, in, p)
		if err == nil {
			break
		}
		if !errors.Is(err, provider.ErrUnavailable) {
			return err
		}
		in.recordError(err)
		in.update(func(s *Status) { s.State = StateUnhealthy })
		in.log.Warn("provider backend unavailable; keeping previous endpoints and retrying the list", "error", err, "retry_in", delay)
		select {
		case <-ctx.Done():
			return nil
		case err := <-watchDone:
			watchDone <- err
			return fmt.Errorf("watch: %w", cmpErr(err, errors.New("watch stream ended")))
		case <-time.After(delay):
		}
	}
	in.log.Info("provider plugin running", "plugin", info.Name, "version", info.Version, "pid", cmd.Process.Pid)

	healthCtx, stopHealth := context.WithCancel(ctx)
	hung := make(chan error, 1)
	go func() { hung <- h.checkHealth(healthCtx, in, health, client.Exited) }()
	defer func() {
		stopHealth()
		<-hung
	}()
	resyncTick := time.NewTicker(h.opts.Resync)
	defer resyncTick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case err := <-watchDone:
			watchDone <- err // for the deferred wait
			return fmt.Errorf("watch: %w", cmpErr(err, errors.New("watch stream ended")))
		case ev := <-events:
			h.applyBatch(in, ev, events)
		case <-resyncTick.C:
			if err := h.resync(ctx, in, p); errors.Is(err, provider.ErrUnavailable) {
				in.recordError(err)
				in.log.Warn("periodic resync: provider backend unavailable; keeping current endpoints", "error", err)
			} else if err != nil {
				return err
			}
		case err := <-hung:
			hung <- nil // for the deferred wait
			if err == nil {
				return nil
			}
			// A hung process cannot shut down gracefully: kill it now so
			// the restart does not wait for go-plugin's grace period.
			_ = cmd.Process.Kill()
			return err
		}
	}
}

// checkHealth asks the plugin's health service every HealthInterval, one
// check at a time, until ctx is done (nil) or the plugin has exited or has
// answered no check for HangTimeout (the error says which).
func (h *Host) checkHealth(ctx context.Context, in *instance, health grpc_health_v1.HealthClient, exited func() bool) error {
	tick := time.NewTicker(h.opts.HealthInterval)
	defer tick.Stop()
	lastAnswer := time.Now()
	var lateSince time.Time // the start of the first check of a run of late or unanswered ones
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		if exited() {
			return errors.New("plugin process exited")
		}
		start := time.Now()
		cctx, cancel := context.WithDeadline(ctx, lastAnswer.Add(h.opts.HangTimeout))
		_, err := health.Check(cctx, &grpc_health_v1.HealthCheckRequest{Service: plugin.GRPCServiceName})
		cancel()
		took := time.Since(start)
		switch {
		case ctx.Err() != nil:
			return nil
		case err == nil && took <= h.opts.HealthTimeout:
			if !lateSince.IsZero() {
				in.log.Info("provider plugin answers its health checks in time again", "late_for", start.Sub(lateSince).Round(time.Millisecond))
				lateSince = time.Time{}
			}
			lastAnswer = time.Now()
		case err == nil:
			if lateSince.IsZero() {
				in.log.Warn("provider plugin answered its health check late (it, or this server, is overloaded)", "took", took.Round(time.Millisecond), "kill_after", h.opts.HangTimeout)
				lateSince = start
			}
			lastAnswer = time.Now()
		case time.Since(lastAnswer) >= h.opts.HangTimeout:
			return fmt.Errorf("plugin answered no health check for %v (hung); killing it: %w", h.opts.HangTimeout, err)
		default:
			if lateSince.IsZero() {
				in.log.Warn("provider plugin did not answer a health check", "error", err, "kill_after", h.opts.HangTimeout)
				lateSince = start
			}
		}
	}
}

// resync lists every service and endpoint and replaces the instance's share
// of the catalog with it.
func (h *Host) resync(ctx context.Context, in *instance, p provider.Provider) error {
	callCtx, cancel := context.WithTimeout(ctx, h.opts.CallTimeout)
	defer cancel()
	all, err := listAll(callCtx, in, p)
	if err != nil {
		return err
	}
	h.sink.ReplaceProvider(in.Name, all)
	defer h.noteListed()
	in.update(func(s *Status) {
		in.known = make(map[mesh.MeshService]struct{}, len(all))
		for svc := range all {
			in.known[svc] = struct{}{}
		}
		s.LastSync = time.Now()
		s.StaleSince = nil
		s.Services = len(all)
		if s.State != StateUnhealthy {
			s.State = StateRunning
		}
	})
	return nil
}

// allLister is a plugin client that lists every service with its
// endpoints in one call (provider.GRPCClient; a plugin built before
// ListAll existed answers errors.ErrUnsupported).
type allLister interface {
	ListAll(ctx context.Context, each func(provider.Service, []provider.Endpoint) error) error
}

// listAll returns every service the plugin knows with its endpoints: in
// one call where the plugin has it, else service by service (a round trip
// each: a second for a few thousand services).
func listAll(ctx context.Context, in *instance, p provider.Provider) (map[mesh.MeshService][]mesh.Endpoint, error) {
	if l, ok := p.(allLister); ok {
		all := map[mesh.MeshService][]mesh.Endpoint{}
		err := l.ListAll(ctx, func(s provider.Service, eps []provider.Endpoint) error {
			if svc, ok := in.meshService(s); ok {
				all[svc] = in.meshEndpoints(svc, eps)
			}
			return nil
		})
		if !errors.Is(err, errors.ErrUnsupported) {
			if err != nil {
				return nil, fmt.Errorf("list services and endpoints: %w", err)
			}
			return all, nil
		}
	}
	svcs, err := p.ListServices(ctx)
	if err != nil {
		return nil, fmt.Errorf("list services: %w", err)
	}
	all := make(map[mesh.MeshService][]mesh.Endpoint, len(svcs))
	for _, s := range svcs {
		svc, ok := in.meshService(s)
		if !ok {
			continue
		}
		eps, err := p.ListEndpoints(ctx, s)
		if errors.Is(err, provider.ErrNotFound) {
			continue // deleted since ListServices; the watch says so too
		}
		if err != nil {
			return nil, fmt.Errorf("list endpoints of %s: %w", s, err)
		}
		all[svc] = in.meshEndpoints(svc, eps)
	}
	return all, nil
}

// received is a watch event and when the host received it.
type received struct {
	provider.Event
	at time.Time
}

// applyBatch applies first and the events queued behind it when it
// starts (not those arriving meanwhile, so a fast plugin cannot keep the
// host from its health checks), and logs at Debug level how long they
// waited and took: the host's share of a change's latency.
func (h *Host) applyBatch(in *instance, first received, queue <-chan received) {
	start := time.Now()
	h.apply(in, first.Event)
	n := 1 + len(queue)
	for range n - 1 {
		h.apply(in, (<-queue).Event)
	}
	in.log.Debug("provider events applied", "events", n, "queued", start.Sub(first.at), "apply", time.Since(start))
}

func (h *Host) apply(in *instance, ev provider.Event) {
	switch {
	case ev.Health != nil:
		in.update(func(s *Status) {
			if ev.Health.Healthy {
				s.State = StateRunning
			} else {
				s.State = StateUnhealthy
			}
		})
		if ev.Health.Healthy {
			in.log.Info("provider healthy again")
			return
		}
		in.recordError(errors.New(ev.Health.Message))
		in.log.Warn("provider unhealthy; its last good endpoints stay in force", "error", ev.Health.Message)
	case ev.Deleted:
		if svc, ok := in.meshService(ev.Service); ok {
			h.sink.DeleteService(in.Name, svc)
			in.update(func(s *Status) {
				delete(in.known, svc)
				s.Services = len(in.known)
			})
		}
	default:
		if svc, ok := in.meshService(ev.Service); ok {
			h.sink.SetEndpoints(in.Name, svc, in.meshEndpoints(svc, ev.Endpoints))
			in.update(func(s *Status) {
				in.known[svc] = struct{}{}
				s.Services = len(in.known)
			})
		}
	}
}

func (in *instance) meshService(s provider.Service) (mesh.MeshService, bool) {
	svc := mesh.MeshService{Namespace: s.Namespace, Name: s.Name}
	if err := svc.Validate(); err != nil {
		err = fmt.Errorf("plugin reported an invalid service, ignored: %w", err)
		in.recordError(err)
		in.log.Warn(err.Error())
		return svc, false
	}
	return svc, true
}

func (in *instance) meshEndpoints(svc mesh.MeshService, eps []provider.Endpoint) []mesh.Endpoint {
	out := make([]mesh.Endpoint, 0, len(eps))
	for _, e := range eps {
		if err := e.Validate(); err != nil {
			err = fmt.Errorf("plugin reported an invalid endpoint of %s, ignored: %w", svc, err)
			in.recordError(err)
			in.log.Warn(err.Error())
			continue
		}
		out = append(out, mesh.Endpoint{IP: e.IP, Port: e.Port, Labels: e.Labels, Provider: in.Name})
	}
	return out
}

// stop ends the plugin process: gracefully when it answers, by SIGKILL
// when it does not (go-plugin's graceful Kill waits forever on a stopped
// process).
func stop(client *plugin.Client, cmd *exec.Cmd) {
	done := make(chan struct{})
	var wg sync.WaitGroup
	wg.Go(func() {
		select {
		case <-done:
		case <-time.After(2 * time.Second):
			if cmd.Process != nil {
				_ = cmd.Process.Kill()
			}
		}
	})
	client.Kill()
	close(done)
	wg.Wait()
}

// checkExecutable checks that the plugin exists and, when pinned, that its
// SHA-256 matches; it returns a fresh go-plugin SecureConfig for the pin
// (go-plugin checks again as it starts the process).
func checkExecutable(path, pin string) (*plugin.SecureConfig, error) {
	fi, err := os.Stat(path)
	if err != nil {
		return nil, fmt.Errorf("plugin executable %s: %w (install the plugin there or fix `plugin` / `pluginDir` in the server config)", path, err)
	}
	if fi.IsDir() || fi.Mode().Perm()&0o111 == 0 {
		return nil, fmt.Errorf("plugin %s is not an executable file (chmod +x it)", path)
	}
	if pin == "" {
		return nil, nil
	}
	want, err := hex.DecodeString(pin)
	if err != nil || len(want) != sha256.Size {
		return nil, fmt.Errorf("sha256 pin %q for %s is not 64 hex digits", pin, path)
	}
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return nil, fmt.Errorf("hash plugin %s: %w", path, err)
	}
	if got := hex.EncodeToString(sum.Sum(nil)); got != hex.EncodeToString(want) {
		return nil, fmt.Errorf("plugin %s has sha256 %s but the server config pins %s: reinstall the plugin you meant, or update `sha256` if this build is trusted", path, got, pin)
	}
	return &plugin.SecureConfig{Checksum: want, Hash: sha256.New()}, nil
}

// cmpErr returns err, or def when err is nil.
func cmpErr(err, def error) error {
	if err != nil {
		return err
	}
	return def
}
