package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime/debug"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/provider"
)

// azureDriver is the Azure endpoints provider's driver: one instance reads
// one subscription. It holds no package state, so several can run in one
// process (tests do) as well as one per plugin process.
type azureDriver struct {
	log     *slog.Logger
	connect connectFunc
	// fixture is the test mode's connector; nil in production builds,
	// which then refuse the testFixture key.
	fixture connectFunc

	// Set by Configure.
	cfg     config
	clients *armClients
}

var _ provider.Driver = (*azureDriver)(nil)

// newProvider returns the Azure provider, which reads ARM through connect.
// open is the test mode's fixture opener, nil in production builds.
// Configure waits up to 20 s for the first poll; if ARM cannot be read it
// still succeeds, reports unhealthy, and List calls return ErrUnavailable
// until a poll succeeds.
func newProvider(log *slog.Logger, connect connectFunc, open fixtureOpener) *provider.Plugin {
	d := &azureDriver{log: log, connect: connect}
	if open != nil {
		d.fixture = connectFixture(open)
	}
	p := provider.NewPlugin(log, d)
	p.FirstReadWait = 20 * time.Second
	return p
}

func (d *azureDriver) Describe() provider.Info {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	desc := "Azure VM Scale Sets (Uniform and Flexible) and VMs, tagged with a mesh service, read from Azure Resource Manager"
	if d.fixture != nil {
		desc += " (test build: accepts testFixture)"
	}
	return provider.Info{Name: "azure", Version: version, Description: desc}
}

// Configure parses the config and builds the ARM clients. A bad config is
// ErrInvalidConfig.
func (d *azureDriver) Configure(_ context.Context, instance string, raw []byte) error {
	cfg, err := parseConfig(raw, d.fixture != nil)
	if err != nil {
		return err
	}
	connect := d.connect
	if cfg.TestFixture != "" {
		connect = d.fixture
	}
	clients, err := connect(cfg)
	if err != nil {
		return err
	}
	d.log = d.log.With("instance", instance)
	d.cfg, d.clients = cfg, clients
	return nil
}

// Run polls ARM until ctx is done.
func (d *azureDriver) Run(ctx context.Context, s *provider.State) error {
	pl := &poller{log: d.log, cfg: d.cfg, clients: d.clients, state: s}
	pl.run(ctx)
	return nil
}

// poller reads ARM every poll interval and publishes complete reads.
type poller struct {
	log     *slog.Logger
	cfg     config
	clients *armClients
	state   *provider.State
	// tags describes the resources with unusable tags found by the last
	// complete read; "" when there were none.
	tags string
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
			pl.setHealth(err, wait)
		}
		t := time.NewTimer(wait)
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}

// setHealth reports the last poll's error (retried after wait) and the
// unusable tags of the last complete read.
func (pl *poller) setHealth(err error, wait time.Duration) {
	pl.state.SetUnhealthy(pl.problems(err, wait))
}

// problems joins the last poll's error and the unusable tags of the last
// complete read; nil when there are none.
func (pl *poller) problems(err error, wait time.Duration) error {
	var problems []string
	if err != nil {
		problems = append(problems, describe(err, pl.cfg, wait))
	}
	if pl.tags != "" {
		problems = append(problems, pl.tags)
	}
	if len(problems) == 0 {
		return nil
	}
	return errors.New(strings.Join(problems, "; also "))
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
	// Endpoints and health in one step: whoever sees the new endpoints
	// sees the problems of the read that found them.
	pl.tags = summarize(d.problems)
	pl.state.ReplaceAllWithHealth(d.services, pl.problems(nil, 0))
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
