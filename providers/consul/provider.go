package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/provider"
)

// consulDriver is the Consul provider's driver: one instance follows one
// Consul datacenter. It holds no package state, so several can run in one
// process (tests do) as well as one per plugin process.
type consulDriver struct {
	log *slog.Logger

	// Set by Configure.
	cfg    config
	client *api.Client
	agent  string
	pace   pacing
}

var _ provider.Driver = (*consulDriver)(nil)

// newProvider returns the Consul provider. Configure waits up to 15 s for
// the first complete read of the catalog; if Consul cannot be read by
// then it still succeeds, reports unhealthy, and List calls return
// ErrUnavailable until a read succeeds.
func newProvider(log *slog.Logger) *provider.Plugin {
	p := provider.NewPlugin(log, &consulDriver{log: log})
	p.FirstReadWait = 15 * time.Second
	return p
}

func (d *consulDriver) Describe() provider.Info {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	return provider.Info{
		Name:        "consul",
		Version:     version,
		Description: "healthy instances of Consul catalog services, followed with blocking queries on the health endpoint",
	}
}

// Configure parses the config and builds the Consul client. A bad config
// is ErrInvalidConfig.
func (d *consulDriver) Configure(_ context.Context, instance string, raw []byte) error {
	cfg, err := parseConfig(raw)
	if err != nil {
		return err
	}
	ac := cfg.apiConfig()
	client, err := api.NewClient(ac)
	if err != nil {
		return fmt.Errorf("%w: consul client for %s: %v; check address and the tls files", provider.ErrInvalidConfig, agentURL(ac), err)
	}
	d.log = d.log.With("instance", instance)
	d.cfg, d.client, d.agent = cfg, client, agentURL(ac)
	d.pace = defaultPacing
	d.pace.wait = time.Duration(cfg.WaitTime)
	return nil
}

// Run follows the catalog until ctx is done.
func (d *consulDriver) Run(ctx context.Context, s *provider.State) error {
	newCatalog(d.log, d.cfg, d.client, d.agent, d.pace, s).run(ctx)
	return nil
}
