package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/osm-vm/osm-vm/provider"
)

// clientFunc builds the Kubernetes client for a config; it returns the API
// server's address for messages. Tests pass a fake clientset.
type clientFunc func(cfg config, userAgent string) (kubernetes.Interface, string, error)

// kubeDriver is the Kubernetes endpoints provider's driver: one instance
// watches one cluster. It holds no package state, so several can run in
// one process (tests do) as well as one per plugin process.
type kubeDriver struct {
	log       *slog.Logger
	newClient clientFunc

	// Set by Configure.
	cfg    config
	client kubernetes.Interface
	host   string
}

var _ provider.Driver = (*kubeDriver)(nil)

// newProvider returns the Kubernetes provider. Configure waits up to 15 s
// for the informers' first complete list; if the cluster is not reachable
// by then it still succeeds, reports unhealthy, and List calls return
// ErrUnavailable until the informers sync.
func newProvider(log *slog.Logger, newClient clientFunc) *provider.Plugin {
	p := provider.NewPlugin(log, &kubeDriver{log: log, newClient: newClient})
	p.FirstReadWait = 15 * time.Second
	return p
}

func (d *kubeDriver) Describe() provider.Info {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	return provider.Info{
		Name:        "kubernetes",
		Version:     version,
		Description: "Kubernetes Services and EndpointSlices from one cluster, watched with client-go informers",
	}
}

// Configure parses the config and builds the client. A bad config is
// ErrInvalidConfig.
func (d *kubeDriver) Configure(_ context.Context, instance string, raw []byte) error {
	cfg, err := parseConfig(raw)
	if err != nil {
		return err
	}
	client, host, err := d.newClient(cfg, "osm-provider-kubernetes/"+instance)
	if err != nil {
		return err
	}
	d.log = d.log.With("instance", instance)
	d.cfg, d.client, d.host = cfg, client, host
	return nil
}

// Run runs the informers until ctx is done.
func (d *kubeDriver) Run(ctx context.Context, s *provider.State) error {
	c, err := newCluster(d.log, d.cfg, d.client, d.host, s)
	if err != nil {
		return fmt.Errorf("kubernetes API %s: %w", d.host, err)
	}
	c.run(ctx)
	return nil
}
