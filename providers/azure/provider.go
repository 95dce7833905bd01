package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/provider"
)

// azureProvider is the Azure endpoints provider: one instance reads one
// subscription. It holds no package state, so several can run in one
// process (tests do) as well as one per plugin process.
type azureProvider struct {
	log     *slog.Logger
	connect connectFunc
	// fixture is the test mode's connector; nil in production builds,
	// which then refuse the testFixture key.
	fixture connectFunc
	// firstPollWait bounds how long Configure waits for the first poll.
	firstPollWait time.Duration

	mu     sync.Mutex
	hub    *hub // nil until configured
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ provider.Provider = (*azureProvider)(nil)

// newProvider returns a provider that reads ARM through connect. open is
// the test mode's fixture opener, nil in production builds.
func newProvider(log *slog.Logger, connect connectFunc, open fixtureOpener) *azureProvider {
	p := &azureProvider{log: log, connect: connect, firstPollWait: 20 * time.Second}
	if open != nil {
		p.fixture = connectFixture(open)
	}
	return p
}

func (p *azureProvider) Describe(context.Context) (provider.Info, error) {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	desc := "Azure VM Scale Sets (Uniform and Flexible) and VMs, tagged with a mesh service, read from Azure Resource Manager"
	if p.fixture != nil {
		desc += " (test build: accepts testFixture)"
	}
	return provider.Info{Name: "azure", Version: version, Description: desc}, nil
}

// Configure parses the config, builds the ARM clients and starts polling.
// It waits up to firstPollWait (bounded by ctx) for the first poll; if ARM
// cannot be read by then it still succeeds, reports unhealthy, and List
// calls return ErrUnavailable until a poll succeeds. A bad config is
// ErrInvalidConfig.
func (p *azureProvider) Configure(ctx context.Context, instance string, raw []byte) error {
	cfg, err := parseConfig(raw, p.fixture != nil)
	if err != nil {
		return err
	}
	connect := p.connect
	if cfg.TestFixture != "" {
		connect = p.fixture
	}
	p.mu.Lock()
	if p.hub != nil {
		p.mu.Unlock()
		return fmt.Errorf("azure provider instance %q is already configured; restart the plugin to change its config", instance)
	}
	clients, err := connect(cfg)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	log := p.log.With("instance", instance)
	h := newHub(log)
	// The poller outlives this call: it runs until Close (or the plugin
	// process ends).
	runCtx, cancel := context.WithCancel(context.Background())
	pl := &poller{log: log, cfg: cfg, clients: clients, hub: h}
	p.wg.Go(func() { pl.run(runCtx) })
	p.hub, p.cancel = h, cancel
	p.mu.Unlock()

	wait := time.NewTimer(p.firstPollWait)
	defer wait.Stop()
	select {
	case <-h.polled:
	case <-ctx.Done():
	case <-wait.C:
	}
	return nil
}

func (p *azureProvider) configured() (*hub, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hub == nil {
		return nil, fmt.Errorf("azure provider: call Configure first: %w", provider.ErrNotConfigured)
	}
	return p.hub, nil
}

func (p *azureProvider) ListServices(context.Context) ([]provider.Service, error) {
	h, err := p.configured()
	if err != nil {
		return nil, err
	}
	return h.listServices()
}

func (p *azureProvider) ListEndpoints(_ context.Context, svc provider.Service) ([]provider.Endpoint, error) {
	h, err := p.configured()
	if err != nil {
		return nil, err
	}
	return h.listEndpoints(svc)
}

func (p *azureProvider) Watch(ctx context.Context, send func(provider.Event) error) error {
	h, err := p.configured()
	if err != nil {
		return err
	}
	return h.watch(ctx, send)
}

// Close stops polling and waits for it. The plugin process does not need
// it (it ends with the host); tests do.
func (p *azureProvider) Close() error {
	p.mu.Lock()
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	p.wg.Wait()
	return nil
}

// poller reads ARM every poll interval and publishes complete reads.
type poller struct {
	log     *slog.Logger
	cfg     config
	clients *armClients
	hub     *hub
}

func (pl *poller) run(ctx context.Context) {
	throttled := 0
	for {
		err := pl.poll(ctx)
		if ctx.Err() != nil {
			return
		}
		if isThrottled(err) {
			throttled++
		} else {
			throttled = 0
		}
		wait := nextPoll(pl.cfg.pollInterval(), err, throttled)
		if err != nil {
			pl.hub.setProblem(sourceARM, describe(err, pl.cfg, wait))
		} else {
			pl.hub.setProblem(sourceARM, "")
		}
		pl.hub.pollDone()
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// poll does one complete read and publishes it; on error the last good
// state stays.
func (pl *poller) poll(ctx context.Context) error {
	if pl.clients.refresh != nil {
		if err := pl.clients.refresh(); err != nil {
			return err
		}
	}
	start := time.Now()
	d, err := discover(ctx, pl.log, pl.cfg, pl.clients)
	if err != nil {
		return err
	}
	pl.hub.replace(d.services)
	pl.hub.setProblem(sourceTags, summarize(d.problems))
	pl.log.Debug("polled Azure Resource Manager", "services", len(d.services), "took", time.Since(start))
	return nil
}

// maxThrottleBackoff caps how many times the poll interval is doubled
// while ARM keeps throttling without saying for how long.
const maxThrottleBackoff = 3

// nextPoll is the wait before the next poll: the poll interval, doubled
// for each throttled poll in a row (up to 8 times), and never shorter
// than the Retry-After of the last error.
func nextPoll(interval time.Duration, err error, throttledInARow int) time.Duration {
	wait := interval
	if throttledInARow > 0 {
		wait = interval << min(throttledInARow-1, maxThrottleBackoff)
	}
	return max(wait, retryAfter(err))
}

// maxReportedProblems bounds how many bad resources the health message
// names, so one mis-tagged fleet does not make a megabyte of status.
const maxReportedProblems = 10

// summarize joins per-resource problems into one health message.
func summarize(problems []string) string {
	if len(problems) <= maxReportedProblems {
		return strings.Join(problems, "; ")
	}
	return fmt.Sprintf("%s; and %d more resources with unusable tags", strings.Join(problems[:maxReportedProblems], "; "), len(problems)-maxReportedProblems)
}
