package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"
	"golang.org/x/sync/errgroup"

	"github.com/osm-vm/osm-vm/internal/api"
	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/pluginhost"
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
			log, err := newLogger(stderr, logFormat, logLevel)
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
	f.StringVar(&overrides.DebugAddress, "debug-address", "", "address for health, metrics and the read-only API (config key debugAddress)")
	f.StringVar(&overrides.APIAddress, "api-address", "", "HTTPS address for enrollment and the admin API (config key apiAddress)")
	f.StringVar(&overrides.XDSAddress, "xds-address", "", "gRPC mTLS address for xDS (config key xdsAddress)")
	f.StringVar(&logFormat, "log-format", "text", "log format: text or json")
	f.StringVar(&logLevel, "log-level", "info", "log level: debug, info, warn or error")
	return cmd
}

// serve runs every component until ctx is done or one of them fails.
func serve(ctx context.Context, log *slog.Logger, cfg Config) error {
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data dir: %w (set dataDir / --data-dir to a writable directory)", err)
	}
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

	cat := catalog.New()
	host := pluginhost.New(log, pluginhost.Options{PluginDir: cfg.PluginDir, Instances: instances}, cat)
	debugAPI := api.New(log, buildVersion(), cat, host)

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return host.Run(ctx) })
	g.Go(func() error { return debugAPI.Serve(ctx, cfg.DebugAddress, nil) })
	err := g.Wait()
	log.Info("osm-server stopped")
	return err
}
