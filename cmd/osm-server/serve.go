package main

import (
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"time"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/osm-vm/osm-vm/internal/api"
	"github.com/osm-vm/osm-vm/internal/atomicfile"
	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/cli"
	"github.com/osm-vm/osm-vm/internal/dashboard"
	"github.com/osm-vm/osm-vm/internal/dnspublish"
	"github.com/osm-vm/osm-vm/internal/ejections"
	"github.com/osm-vm/osm-vm/internal/enroll"
	"github.com/osm-vm/osm-vm/internal/gctune"
	"github.com/osm-vm/osm-vm/internal/join"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/pluginhost"
	"github.com/osm-vm/osm-vm/internal/presence"
	"github.com/osm-vm/osm-vm/internal/sessionticket"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/spechttp"
	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/store/boltstore"
	"github.com/osm-vm/osm-vm/internal/store/consulstore"
	"github.com/osm-vm/osm-vm/internal/xds"
	xdscache "github.com/osm-vm/osm-vm/internal/xds/cache"
)

func newServeCmd(stderr io.Writer) *cobra.Command {
	var (
		configFile          string
		logFormat, logLevel string
		overrides           Config
	)
	cmd := &cobra.Command{
		Use:   "serve [--config FILE]",
		Short: "Run the control plane",
		Long: `Run the control plane. Without --config it starts on the defaults: data in
/var/lib/osm (root) or ~/.local/state/osm, plugins from /usr/lib/osm/plugins or
the directory holding osm-server, the debug API on 127.0.0.1:15090. Flags
override the matching keys of the config file.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := cli.NewLogger(stderr, logFormat, logLevel)
			if err != nil {
				return err
			}
			cfg := defaultConfig()
			if configFile != "" {
				if cfg, err = loadConfig(configFile); err != nil {
					return err
				}
			}
			flags := cmd.Flags()
			for _, o := range []struct {
				flag string
				dst  *string
				val  string
			}{
				{"data-dir", &cfg.DataDir, overrides.DataDir},
				{"plugin-dir", &cfg.PluginDir, overrides.PluginDir},
				{"debug-address", &cfg.DebugAddress, overrides.DebugAddress},
				{"api-address", &cfg.APIAddress, overrides.APIAddress},
				{"xds-address", &cfg.XDSAddress, overrides.XDSAddress},
				{"store", &cfg.Store.Backend, overrides.Store.Backend},
			} {
				if flags.Changed(o.flag) {
					*o.dst = o.val
				}
			}
			if err := cfg.validate(); err != nil {
				return fmt.Errorf("invalid configuration:\n%w", err)
			}
			return serve(cmd.Context(), log, cfg)
		},
	}
	f := cmd.Flags()
	f.StringVar(&configFile, "config", "", "YAML configuration file")
	f.StringVar(&overrides.DataDir, "data-dir", "", "directory for the server's state (config key dataDir)")
	f.StringVar(&overrides.PluginDir, "plugin-dir", "", "directory holding provider plugins (config key pluginDir)")
	f.StringVar(&overrides.DebugAddress, "debug-address", "", "address for health, metrics, the read-only API and, with the admin token, /debug/ (config key debugAddress)")
	f.StringVar(&overrides.APIAddress, "api-address", "", "HTTPS address for enrollment and the admin API (config key apiAddress)")
	f.StringVar(&overrides.XDSAddress, "xds-address", "", "gRPC mTLS address for xDS (config key xdsAddress)")
	f.StringVar(&overrides.Store.Backend, "store", "", "where the state lives: bbolt (a file in the data directory) or consul (several replicas; Consul from the config's store.consul or CONSUL_HTTP_ADDR, CONSUL_HTTP_TOKEN, ...) (config key store.backend)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// serve runs every component until ctx is done or one of them fails.
func serve(ctx context.Context, log *slog.Logger, cfg Config) error {
	instances := make([]pluginhost.Instance, len(cfg.Providers))
	for i, p := range cfg.Providers {
		conf, err := json.Marshal(p.Config)
		if err != nil {
			return fmt.Errorf("providers[%d].config: %w", i, err)
		}
		instances[i] = pluginhost.Instance{Name: p.Name, Plugin: p.Plugin, SHA256: p.SHA256, Config: conf}
	}
	if len(instances) == 0 {
		log.Warn("no providers configured: the mesh has no endpoints until a `providers:` entry is added to the config")
	}
	log.Info("osm-server starting", "version", buildVersion(), "data_dir", cfg.DataDir, "plugin_dir", cfg.PluginDir, "providers", len(instances))
	rts := gctune.Apply(log, gctune.Config{GCPercent: cfg.GCPercent, MemoryLimit: int64(cfg.MemoryLimit)})

	st, err := openStore(ctx, log, cfg)
	if err != nil {
		return err
	}
	defer st.Close()
	reg := cli.NewRegistry()
	kv, err := store.Instrument(st, reg)
	if err != nil {
		return err
	}
	adminToken, err := loadOrCreateAdminToken(cfg.DataDir)
	if err != nil {
		return err
	}
	if cfg.Store.Backend == storeConsul {
		// Replicas share one admin token, so any of them takes the CLI's.
		if adminToken, err = shareAdminToken(ctx, st, cfg.DataDir, adminToken); err != nil {
			return err
		}
	}
	sp, err := spec.New(ctx, log.With("component", "spec"), kv)
	if err != nil {
		return err
	}
	meshCfg := sp.Snapshot()
	// Singleton duties (pruning) run on one replica at a time: under a
	// Consul lock, or here when the store is this server's own.
	duty := func(string) certificate.Duty { return nil }
	if cs, ok := st.(*consulstore.Store); ok {
		duty = func(name string) certificate.Duty { return cs.Duty(name) }
	}
	certs, err := certificate.New(ctx, log.With("component", "certificate"), kv, certificate.Options{
		Duty:            duty("prune-proxy-records"),
		TrustDomain:     cfg.TrustDomain,
		ServiceLifetime: meshCfg.ServiceCertLifetime(),
		ProxyLifetime:   meshCfg.ProxyCertLifetime(),
		// 0 in Options means the default; the setting's 0 means at expiry.
		ProxyRecordRetention: max(cfg.ProxyRecordRetention, time.Nanosecond),
		Lifetimes:            specLifetimes{sp},
	})
	if err != nil {
		return err
	}
	if err := atomicfile.WriteFile(filepath.Join(cfg.DataDir, caCertFile), certs.RootPEM(), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", caCertFile, err)
	}
	log.Info("mesh CA ready", "trust_domain", certs.TrustDomain(), "ca_cert_hash", certs.CAHash())

	cat := catalog.New()
	host := pluginhost.New(log, pluginhost.Options{PluginDir: cfg.PluginDir, Instances: instances}, cat)

	xdsFor := xdsAddressFor(cfg.XDSAddress)
	tokens := enroll.NewTokens(kv, nil)
	tokenPruner := enroll.NewTokenPruner(log, tokens, enroll.PruneOptions{Retention: cfg.TokenRetention, Duty: duty("prune-tokens")})
	self, advertised := advertisedReplica(cfg)
	if !advertised {
		log.Info("this server is not in the replica list agents fail over along: its API or xDS listener is on an unspecified address and serverNames is empty (set serverNames)")
	}
	replicas := enroll.NewReplicas(log.With("component", "replicas"), kv, self)
	httpsTLS := &tls.Config{
		MinVersion:     tls.VersionTLS12,
		GetCertificate: certs.ServingCertificate(servingNames(cfg)),
		ClientAuth:     tls.VerifyClientCertIfGiven,
		ClientCAs:      certs.CertPool(),
	}

	xdsCache := xdscache.New(log.With("component", "xds-cache"))
	// The mesh model joins the specification, the discovered endpoints and
	// the connected proxies (the xDS server tells it) into the views the
	// publisher renders. After a restart proxies reconnect one by one: for
	// the startup grace every discovered endpoint is sent, so no caller
	// sees its upstreams vanish.
	model := catalog.NewModel(cat, sp, certs.TrustDomain(), cfg.StartupGrace)
	gwReports := xds.NewGatewayReports()
	publisher := xds.NewPublisher(xds.PublisherOptions{Log: log.With("component", "xds-publisher"), Cache: xdsCache, Views: model, Certs: certs, UnusableCertificates: gwReports})
	// Gateway machines' addresses follow their connections, for DNS.
	gateways := dnspublish.NewGatewaySource(model)
	xdsPresence := presences{model, gateways}
	// Replicas on a shared store tell each other which proxies are
	// connected to each, for the participant rule; one server alone
	// writes nothing.
	var sharer *presence.Sharer
	if cfg.Store.Backend == storeConsul {
		sharer = presence.New(log.With("component", "presence"), kv, presenceKey(cfg, self), model, 0)
		xdsPresence = append(xdsPresence, sharer)
	}
	xdsServer := xds.NewServer(log.With("component", "xds"), xdsCache, certs, xds.Options{Watcher: publisher, Presence: xdsPresence,
		HandshakeTimeout: cfg.HandshakeTimeout, MaxStreamsPerProxy: cfg.XDSMaxStreamsPerProxy})
	// A Gateway's Programmed status follows the machines connected as it.
	gwMachines := xds.NewGatewayMachines(xds.GatewayMachinesOptions{Proxies: xdsServer, Status: xdsCache, Reports: gwReports, Refresher: publisher})
	// The backends each Envoy reports ejected, for the dashboard.
	ejected := ejections.New(nil)
	identity := api.NewIdentityRoutes(log.With("component", "identity"), certs, sp, api.IdentityOptions{
		XDSAddress: xdsFor, Replicas: replicas.List, GatewayReports: gwMachines, Ejections: ejected,
	})
	admin := http.NewServeMux()
	admin.Handle("/api/v1/tokens", enroll.NewTokenAdminHandler(log, tokens))
	admin.Handle("/api/v1/tokens/", enroll.NewTokenAdminHandler(log, tokens))
	identity.Admin(admin)
	admin.Handle("/", spechttp.NewHandler(log.With("component", "spec"), sp, spechttp.Options{HasEndpoints: hasEndpoints(cat, host), GatewayMachines: gwMachines}))
	enrollHandler := enroll.NewHandlerWithReplicas(log.With("component", "enroll"), tokens, certs, xdsFor, replicas.List, certificate.ErrNotFound, certificate.ErrRevoked, certificate.ErrExpired, certificate.ErrInvalidCSR)
	public := append(identity.Public(), api.Route{Pattern: join.Prefix, Handler: join.NewHandler(log.With("component", "join"), certs.RootPEM(), cfg.agentPackageDir(), join.Limits{Downloads: cfg.JoinDownloads, PerClient: cfg.JoinDownloadsPerClient})})
	for pattern, h := range enrollHandler.Routes() {
		public = append(public, api.Route{Pattern: pattern, Handler: h})
	}
	httpsHandler, err := api.InstrumentHTTPS(api.NewHTTPSHandler(log, adminToken, public, admin), reg)
	if err != nil {
		return err
	}
	dnsPub, err := newDNSPublisher(log.With("component", "dns-publisher"), cfg.DNS, model, gateways, reg)
	if err != nil {
		return err
	}
	// Ready means a client may dial xDS at once: the listener is open.
	readyChecks := []func() error{xdsServer.Ready}
	var storeHealth *consulstore.Health
	if cs, ok := st.(*consulstore.Store); ok {
		storeHealth = consulstore.NewHealth(log.With("component", "store"), cs, consulstore.HealthOptions{ProbeKey: adminTokenKey})
		if err := storeHealth.Register(reg); err != nil {
			return err
		}
		readyChecks = append([]func() error{storeHealth.Ready}, readyChecks...)
	}
	debugOpts := api.Options{
		XDS: xdsDebug{xds.Debug{Server: xdsServer, Cache: xdsCache, Publisher: publisher}},
		Dashboard: dashboard.New(dashboard.Sources{Spec: sp, Catalog: cat, Providers: host,
			Proxies: dashboardProxies(xds.Debug{Server: xdsServer, Cache: xdsCache}), Certificates: dashboardCertificates(certs), Ejections: ejected.Reports}),
		Metrics:     reg,
		ReadyChecks: readyChecks,
	}
	if dnsPub != nil {
		debugOpts.DNSStatus = func() any { return dnsPub.Status() }
	}
	// The debug listener's /debug/ routes take the admin API's token.
	debugAPI := api.New(log.With("component", "debug-api"), buildVersion(), adminToken, cat, host, debugOpts)
	if err := instrument(reg, debugAPI, certs, xdsCache, xdsServer, publisher); err != nil {
		return err
	}
	xdsTLS := &tls.Config{
		MinVersion: tls.VersionTLS13,
		// The same certificate as the API's, without the root: an xDS
		// client trusts the root already and pins nothing.
		GetCertificate: certificate.LeafOnly(httpsTLS.GetCertificate),
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      certs.CertPool(),
	}
	// Session tickets are encrypted with keys kept in the store: a proxy
	// reconnecting after a restart, or to another replica, resumes its
	// TLS session instead of a full handshake.
	tickets, err := sessionticket.New(log.With("component", "session-tickets"), kv, 0)
	if err != nil {
		return err
	}
	if err := tickets.Load(ctx); err != nil {
		return err
	}
	tickets.Apply(xdsTLS)

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return tickets.Run(ctx) })
	g.Go(func() error { return certs.Run(ctx) })
	// Follow the specification other replicas sharing the store apply.
	g.Go(func() error { return sp.Run(ctx) })
	g.Go(func() error { return replicas.Run(ctx) })
	if sharer != nil {
		g.Go(func() error { return sharer.Run(ctx) })
	}
	g.Go(func() error { return tokenPruner.Run(ctx) })
	// xDS starts once every provider has listed its endpoints: a proxy
	// that reconnects after a restart must not be told its upstreams have
	// none.
	providersListed := make(chan struct{})
	afterProviders := func(run func() error) func() error {
		return func() error {
			select {
			case <-ctx.Done():
				return nil
			case <-providersListed:
				return run()
			}
		}
	}
	g.Go(func() error {
		host.WaitListed(ctx, pluginhost.DefaultListWait)
		close(providersListed)
		return nil
	})
	g.Go(afterProviders(func() error { return model.Run(ctx) }))
	g.Go(afterProviders(func() error { return publisher.Run(ctx) }))
	if dnsPub != nil {
		// Publish from a view that holds every provider's list, or a
		// restart would withdraw the names until the model catches up.
		g.Go(afterProviders(func() error { model.Update(); return dnsPub.Run(ctx) }))
	}
	g.Go(func() error { return xdsServer.WatchRevocations(ctx, certs.Subscribe) })
	gcTuner := gctune.New(log.With("component", "gc"), gctune.Options{
		Settings:       rts,
		Load:           func() gctune.Load { return gctune.Load(xdsServer.Load()) },
		IdleCollection: cfg.IdleCollection,
	})
	g.Go(func() error { return gcTuner.Run(ctx) })
	if storeHealth != nil {
		g.Go(func() error { return storeHealth.Run(ctx) })
	}
	g.Go(afterProviders(func() error { return xdsServer.Serve(ctx, cfg.XDSAddress, xdsTLS, nil) }))
	g.Go(func() error { return host.Run(ctx) })
	// The debug listener also answers to the names the serving certificate
	// covers, for a scraper that reaches it by the host's name.
	g.Go(func() error {
		return debugAPI.Serve(ctx, cfg.DebugAddress, api.ServeOptions{Names: servingNames(cfg), HandshakeTimeout: cfg.HandshakeTimeout, WriteTimeout: cfg.WriteTimeout})
	})
	g.Go(func() error {
		return api.ServeTLS(ctx, log, cfg.APIAddress, httpsTLS, httpsHandler, api.ServeOptions{HandshakeTimeout: cfg.HandshakeTimeout, WriteTimeout: cfg.WriteTimeout})
	})
	err = g.Wait()
	log.Info("osm-server stopped")
	return err
}

// storeOpenTimeout bounds the first contact with Consul at start.
const storeOpenTimeout = 15 * time.Second

// serverStore is the store osm-server runs on, with what closes it.
type serverStore interface {
	store.Store
	Close() error
}

// openStore opens the store cfg.Store names: the bbolt file in dataDir, or
// Consul KV (failing at once, naming the address and the fix, when Consul
// cannot be reached or the token may not read the key prefix).
func openStore(ctx context.Context, log *slog.Logger, cfg Config) (serverStore, error) {
	if cfg.Store.Backend != storeConsul {
		return boltstore.Open(cfg.DataDir)
	}
	// The data directory still holds the admin token and ca.crt for the
	// CLI on this host.
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("dataDir: %w", err)
	}
	octx, cancel := context.WithTimeout(ctx, storeOpenTimeout)
	defer cancel()
	st, err := consulstore.Open(octx, cfg.Store.Consul, log.With("component", "store"))
	if err != nil {
		return nil, fmt.Errorf("store.backend consul: cannot start without Consul: %w", err)
	}
	return st, nil
}

// specLifetimes is the MeshConfig's certificate lifetimes, as the
// certificate manager follows them.
type specLifetimes struct{ *spec.Spec }

func (s specLifetimes) Lifetimes() (service, proxy time.Duration) {
	snap := s.Snapshot()
	return snap.ServiceCertLifetime(), snap.ProxyCertLifetime()
}

// providersWaiting is what hasEndpoints needs of the plugin host.
type providersWaiting interface {
	Waiting() []string // providers that have not sent their first list
}

// hasEndpoints answers apply's "is this service served?" from the
// catalog. Until every provider has sent its first list nothing is known
// to be unserved (a start would otherwise warn of every service).
func hasEndpoints(cat *catalog.Catalog, p providersWaiting) spec.HasEndpoints {
	return func(svc mesh.MeshService) bool {
		if len(p.Waiting()) > 0 {
			return true
		}
		se, ok := cat.Snapshot().Endpoints(svc)
		return ok && len(se.Endpoints) > 0
	}
}

// defaultStartupGrace is how long after start the xDS publisher sends
// endpoints whose proxies have not reconnected yet (config startupGrace).
const defaultStartupGrace = 20 * time.Second

// xdsDebug adapts the xDS debug views to the debug API.
type xdsDebug struct{ xds.Debug }

func (d xdsDebug) Proxies() any { return d.Debug.Proxies() }

// xdsAddressFor returns the xDS address to give an agent that reached the
// API as host: the configured address, with a wildcard host replaced by
// the host the agent used (it reached us there).
func xdsAddressFor(xdsAddress string) func(host string) string {
	h, port, _ := net.SplitHostPort(xdsAddress)
	return func(reqHost string) string {
		if ip, err := netip.ParseAddr(h); h != "" && (err != nil || !ip.IsUnspecified()) {
			return xdsAddress
		}
		if rh, _, err := net.SplitHostPort(reqHost); err == nil {
			reqHost = rh
		}
		if reqHost == "" {
			reqHost = "127.0.0.1"
		}
		return net.JoinHostPort(reqHost, port)
	}
}

// servingNames are the names and addresses the serving certificate covers:
// the configured serverNames, the host name, localhost and every local
// address.
func servingNames(cfg Config) []string {
	names := append([]string(nil), cfg.ServerNames...)
	if hn, err := os.Hostname(); err == nil && hn != "" {
		names = append(names, hn)
	}
	names = append(names, "localhost")
	if addrs, err := net.InterfaceAddrs(); err == nil {
		for _, a := range addrs {
			if ipn, ok := a.(*net.IPNet); ok {
				names = append(names, ipn.IP.String())
			}
		}
	}
	for _, a := range []string{cfg.APIAddress, cfg.XDSAddress} {
		if h, _, err := net.SplitHostPort(a); err == nil && h != "" {
			if ip, err := netip.ParseAddr(h); err != nil || !ip.IsUnspecified() {
				names = append(names, h)
			}
		}
	}
	slices.Sort(names[len(cfg.ServerNames):])
	return slices.Compact(names)
}
