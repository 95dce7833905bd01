package main

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/osm-vm/osm-vm/provider"
)

// clientFunc builds the Kubernetes client for a config; it returns the API
// server's address for messages. Tests pass a fake clientset.
type clientFunc func(cfg config, userAgent string) (kubernetes.Interface, string, error)

// kubeProvider is the Kubernetes endpoints provider: one instance watches
// one cluster. It holds no package state, so several can run in one
// process (tests do) as well as one per plugin process.
type kubeProvider struct {
	log         *slog.Logger
	newClient   clientFunc
	syncTimeout time.Duration

	mu     sync.Mutex
	hub    *hub // nil until configured
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

var _ provider.Provider = (*kubeProvider)(nil)

func newProvider(log *slog.Logger, newClient clientFunc) *kubeProvider {
	return &kubeProvider{log: log, newClient: newClient, syncTimeout: 15 * time.Second}
}

func (p *kubeProvider) Describe(context.Context) (provider.Info, error) {
	version := "(devel)"
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" {
		version = bi.Main.Version
	}
	return provider.Info{
		Name:        "kubernetes",
		Version:     version,
		Description: "Kubernetes Services and EndpointSlices from one cluster, watched with client-go informers",
	}, nil
}

// Configure parses the config, connects to the cluster and starts the
// informers. It waits up to syncTimeout (bounded by ctx) for the first
// complete list; if the cluster is not reachable by then it still succeeds,
// reports unhealthy, and List calls return ErrUnavailable until the
// informers sync. A bad config is ErrInvalidConfig.
func (p *kubeProvider) Configure(ctx context.Context, instance string, raw []byte) error {
	cfg, err := parseConfig(raw)
	if err != nil {
		return err
	}
	p.mu.Lock()
	if p.hub != nil {
		p.mu.Unlock()
		return fmt.Errorf("kubernetes provider instance %q is already configured; restart the plugin to change its config", instance)
	}
	log := p.log.With("instance", instance)
	client, host, err := p.newClient(cfg, "osm-provider-kubernetes/"+instance)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	h := newHub(log)
	c, err := newCluster(log, cfg, client, host, h)
	if err != nil {
		p.mu.Unlock()
		return err
	}
	// The informers outlive this call: they run until Close (or the
	// plugin process ends).
	runCtx, cancel := context.WithCancel(context.Background())
	p.wg.Go(func() { c.run(runCtx) })
	p.hub, p.cancel = h, cancel
	p.mu.Unlock()

	wait := time.NewTimer(p.syncTimeout)
	defer wait.Stop()
	select {
	case <-h.syncedC:
	case <-ctx.Done():
		// The host gave up waiting; the informers keep going.
	case <-wait.C:
		h.notSyncedInTime(fmt.Errorf("kubernetes API %s: no complete list of services and endpointslices within %v of start; the provider serves nothing until it has one and keeps retrying", host, p.syncTimeout))
	}
	return nil
}

func (p *kubeProvider) configured() (*hub, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hub == nil {
		return nil, fmt.Errorf("kubernetes provider: call Configure first: %w", provider.ErrNotConfigured)
	}
	return p.hub, nil
}

func (p *kubeProvider) ListServices(context.Context) ([]provider.Service, error) {
	h, err := p.configured()
	if err != nil {
		return nil, err
	}
	return h.listServices()
}

func (p *kubeProvider) ListEndpoints(_ context.Context, svc provider.Service) ([]provider.Endpoint, error) {
	h, err := p.configured()
	if err != nil {
		return nil, err
	}
	return h.listEndpoints(svc)
}

func (p *kubeProvider) Watch(ctx context.Context, send func(provider.Event) error) error {
	h, err := p.configured()
	if err != nil {
		return err
	}
	return h.watch(ctx, send)
}

// Close stops the informers and waits for them. The plugin process does
// not need it (it ends with the host); tests do.
func (p *kubeProvider) Close() error {
	p.mu.Lock()
	cancel := p.cancel
	p.mu.Unlock()
	if cancel != nil {
		cancel()
	}
	p.wg.Wait()
	return nil
}
