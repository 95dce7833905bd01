package provider

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"
)

// Driver is the part of a provider that knows its backend: it parses its
// configuration and then keeps a State up to date. Everything else of the
// plugin contract (List, Watch with coalescing, health, the first-read
// wait, refusing a second Configure) is Plugin's.
type Driver interface {
	// Describe says what the plugin is. It may be called before Configure.
	Describe() Info
	// Configure receives the instance's name and its `config` block as
	// JSON, once per plugin process (again only after a failed call). Parse
	// it with DecodeConfig and return an error wrapping ErrInvalidConfig
	// that names the key and the fix. Do not wait for the backend here:
	// Run does that. The host allows 30 seconds.
	Configure(ctx context.Context, instance string, config []byte) error
	// Run keeps s up to date with the backend until ctx is done, then
	// returns nil. Report the first complete read with s.ReplaceAll, later
	// changes with s.SetEndpoints, s.DeleteService or s.ReplaceAll, and
	// failures with s.SetUnhealthy (the last good state stays served). An
	// error, or a return before ctx is done, means the provider can no
	// longer follow its backend: the host restarts the plugin.
	Run(ctx context.Context, s *State) error
}

// Plugin is the Provider made of a Driver: Configure configures the
// driver and starts its Run with a fresh State, and the List and Watch
// calls are answered from that State.
type Plugin struct {
	// FirstReadWait bounds how long Configure waits for the driver's first
	// complete read (default 20s); after it the provider reports itself
	// unhealthy until the read comes. Set it before Configure.
	FirstReadWait time.Duration

	log    *slog.Logger
	driver Driver

	mu          sync.Mutex
	configuring bool
	state       *State // nil until configured
	cancel      context.CancelFunc
	wg          sync.WaitGroup
}

var _ Provider = (*Plugin)(nil)

// NewPlugin returns the Provider that runs d. log receives the State's
// log lines (health changes, at debug level every change and send).
func NewPlugin(log *slog.Logger, d Driver) *Plugin {
	return &Plugin{FirstReadWait: 20 * time.Second, log: log, driver: d}
}

// ServeDriver serves d as a plugin (see Serve), logging with Logger.
func ServeDriver(d Driver) {
	Serve(NewPlugin(Logger().With("provider", d.Describe().Name), d))
}

func (p *Plugin) Describe(context.Context) (Info, error) { return p.driver.Describe(), nil }

// Configure configures the driver and starts its Run, then waits until
// the first complete read, a reported failure, the end of Run, ctx or
// FirstReadWait, whichever comes first. It fails only when the driver's
// Configure fails or Run fails before its first complete read: a backend
// that is slow or down is reported through health, and the List calls say
// ErrUnavailable until it answers.
func (p *Plugin) Configure(ctx context.Context, instance string, config []byte) error {
	p.mu.Lock()
	if p.state != nil || p.configuring {
		p.mu.Unlock()
		return fmt.Errorf("provider %s instance %q is already configured; restart the plugin to change its config", p.driver.Describe().Name, instance)
	}
	p.configuring = true
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		p.configuring = false
		p.mu.Unlock()
	}()
	if err := p.driver.Configure(ctx, instance, config); err != nil {
		return err
	}

	s := NewState(p.log.With("instance", instance))
	w := s.subscribe() // before Run starts, so no change is missed
	defer s.unsubscribe(w)
	// Run outlives this call: it runs until Close or the end of the
	// plugin process.
	runCtx, cancel := context.WithCancel(context.Background())
	p.wg.Go(func() {
		err := p.driver.Run(runCtx, s)
		if runCtx.Err() != nil {
			return
		}
		if err == nil {
			err = errors.New("it returned without an error before it was stopped")
		}
		s.stop(fmt.Errorf("provider %s instance %q stopped following its backend: %w", p.driver.Describe().Name, instance, err))
	})
	p.mu.Lock()
	p.state, p.cancel = s, cancel
	p.mu.Unlock()

	wait := time.NewTimer(p.FirstReadWait)
	defer wait.Stop()
	for {
		s.mu.Lock()
		complete, unhealthy, stopped := s.complete, s.reported != "", s.stopped
		s.mu.Unlock()
		switch {
		case stopped != nil && !complete:
			return stopped
		case complete || unhealthy || stopped != nil:
			return nil
		}
		select {
		case <-w.wake:
		case <-ctx.Done():
			return nil // the host gave up waiting; Run keeps going
		case <-wait.C:
			s.firstReadLate(p.FirstReadWait)
			return nil
		}
	}
}

func (p *Plugin) configured() (*State, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.state == nil {
		return nil, fmt.Errorf("provider %s: call Configure first: %w", p.driver.Describe().Name, ErrNotConfigured)
	}
	return p.state, nil
}

func (p *Plugin) ListServices(ctx context.Context) ([]Service, error) {
	s, err := p.configured()
	if err != nil {
		return nil, err
	}
	return s.ListServices(ctx)
}

func (p *Plugin) ListEndpoints(ctx context.Context, svc Service) ([]Endpoint, error) {
	s, err := p.configured()
	if err != nil {
		return nil, err
	}
	return s.ListEndpoints(ctx, svc)
}

func (p *Plugin) Watch(ctx context.Context, send func(Event) error) error {
	s, err := p.configured()
	if err != nil {
		return err
	}
	return s.Watch(ctx, send)
}

// State returns the State the driver runs on, nil before Configure. Tests
// use it to read the provider's health.
func (p *Plugin) State() *State {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.state
}

// Close stops the driver's Run and waits for it; Watch calls still running
// return an error. The plugin process does not need it (it ends with the
// host); tests do.
func (p *Plugin) Close() error {
	p.mu.Lock()
	cancel, s := p.cancel, p.state
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	p.wg.Wait()
	if s != nil {
		s.stop(errors.New("provider closed"))
	}
	return nil
}
