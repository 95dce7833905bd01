package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/kardianos/service"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/osm-vm/osm-vm/internal/agent"
	"github.com/osm-vm/osm-vm/internal/cli"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// defaultConfigPath is agent.yaml in the default config directory.
func defaultConfigPath() string { return filepath.Join(agent.DefaultConfigDir(), agent.ConfigFile) }

func newRunCmd(stdout, stderr io.Writer) *cobra.Command {
	var (
		configPath string
		f          installFlags
	)
	cmd := &cobra.Command{
		Use:   "run [--config FILE | --server URL --token TOKEN --ca-cert-hash sha256:HEX --service NAME ...]",
		Short: "Run the agent in the foreground (what the system service runs; with the join flags, enroll and run in one command)",
		Long: `Run the agent in the foreground until SIGTERM or Ctrl-C.

It enrolls with the join token 'osm-agent install' stored if the machine has
no valid proxy certificate (then deletes the token), writes the Envoy and
gRPC xDS bootstraps into the data directory, runs Envoy and restarts it with
backoff when it exits, renews the proxy certificate at two thirds of its
lifetime, and keeps the mesh host names in the hosts file current. On
SIGTERM it drains Envoy (POST /drain_listeners?graceful) for drainTimeout,
then stops it.

With --server (and the other flags of 'osm-agent install') it reads no
config file: it enrolls with --token if the data directory holds no
identity yet and runs, in one command, for containers and other places
without a service manager (as kuma-dp run does). A restart with the same
flags finds the identity and does not need the token again.

With 'proxy: none' in the config (install --proxy none) no proxy runs: the
machine's proxyless gRPC applications read grpc-bootstrap.json and the
service certificate files the agent keeps, and everything else is the same.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := commandLogger(cmd, stderr)
			if err != nil {
				return err
			}
			var cfg agent.Config
			if cmd.Flags().Changed("server") {
				if cmd.Flags().Changed("config") {
					return errors.New("give --config or the join flags (--server, --token, ...), not both")
				}
				if cfg, err = f.prepare(); err != nil {
					return err
				}
				if f.token != "" {
					if _, err := agent.LoadIdentity(cfg.DataDir); err != nil {
						if err := agent.SaveJoinToken(cfg.DataDir, f.token); err != nil {
							return err
						}
					}
				}
			} else if cfg, err = agent.LoadConfig(configPath); err != nil {
				return err
			}
			driver, err := agent.NewDriver(cfg)
			if err != nil {
				return err
			}
			a := agent.New(cfg, log, agent.NetworkEnroller{}, driver, agent.Options{Version: buildVersion(), Metrics: cli.NewRegistry()})
			if agent.UnderServiceManager() { // Windows' SCM started us
				return agent.RunService(agent.NewServiceProgram(log, a.Run, os.Exit))
			}
			return a.Run(cmd.Context())
		},
	}
	cmd.Flags().StringVar(&configPath, "config", defaultConfigPath(), "agent configuration file")
	f.register(cmd.Flags())
	return cmd
}

func newBootstrapCmd(stdout io.Writer) *cobra.Command {
	var configPath, xdsAddress string
	cmd := &cobra.Command{
		Use:   "bootstrap [--config FILE] [--xds-address HOST:PORT]",
		Short: "Print the bootstrap the agent would start the proxy with (the gRPC xDS bootstrap with proxy: none)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := agent.LoadConfig(configPath)
			if err != nil {
				return err
			}
			driver, err := agent.NewDriver(cfg)
			if err != nil {
				return err
			}
			a := agent.New(cfg, discardLogger(), agent.NetworkEnroller{}, driver, agent.Options{Version: buildVersion()})
			data, err := a.RenderBootstrap(xdsAddress)
			if err != nil {
				return err
			}
			_, err = stdout.Write(data)
			return err
		},
	}
	cmd.Flags().StringVar(&configPath, "config", defaultConfigPath(), "agent configuration file")
	cmd.Flags().StringVar(&xdsAddress, "xds-address", "", "xDS server address to render with (default: the one the agent last learned)")
	return cmd
}

// installFlags are the join flags of `osm-agent install` and `osm-agent run`.
type installFlags struct {
	cfg       agent.Config
	servers   []string // --server: one becomes server:, several servers:
	token     string
	configDir string
	noService bool
	enroll    bool
}

// register adds the flags install and run share.
func (f *installFlags) register(fl *pflag.FlagSet) {
	fl.StringSliceVar(&f.servers, "server", nil, "osm-server API address, https://host:port; repeat it (or separate with commas) for several replicas (config key servers)")
	fl.StringVar(&f.token, "token", "", "join token printed by 'osm-server token create' (not needed if already enrolled)")
	fl.StringVar(&f.cfg.CACertHash, "ca-cert-hash", "", "sha256:<hex> pin of the mesh CA, printed by 'osm-server token create'")
	fl.StringVar(&f.cfg.Service, "service", "", "mesh service this machine runs")
	fl.StringVar(&f.cfg.Namespace, "namespace", "default", "namespace of the service")
	fl.StringVar(&f.cfg.Proxy, "proxy", "envoy", "sidecar proxy: envoy, or none when the machine's applications are proxyless gRPC (they read grpc-bootstrap.json)")
	fl.StringVar(&f.cfg.EnvoyPath, "envoy-path", "envoy", "Envoy binary: a path, or a name looked up on PATH")
	fl.Uint16Var(&f.cfg.AdminPort, "admin-port", 0, "Envoy's admin port on 127.0.0.1 (default 15000); set it when several Envoys share a machine")
	fl.StringVar(&f.cfg.HostsFile, "hosts-file", "", "file that holds the managed block of mesh host names (default the system hosts file)")
	fl.Uint16Var(&f.cfg.AppPort, "app-port", 0, "the application's port on 127.0.0.1")
	fl.StringVar(&f.cfg.AdvertiseAddress, "advertise-address", "", "IP address other machines reach this one on")
	fl.StringVar(&f.cfg.Gateway, "gateway", "", "ingress: this machine is the ingress gateway of the Gateway named by --service and --namespace (its Envoy listens on --advertise-address for clients outside the mesh); egress: it is a machine of the EgressGateway named by --service and --namespace (its Envoy accepts the mesh's mTLS on --advertise-address and connects to the external hosts)")
	fl.StringVar(&f.cfg.GatewayCertDir, "gateway-cert-dir", "", "with --gateway ingress: directory of the certificate files of the Gateway's HTTPS listeners, <dir>/<namespace>/<secret>/tls.crt and tls.key (default "+meshapi.DefaultGatewayCertDir+")")
	fl.StringVar(&f.cfg.DataDir, "data-dir", agent.DefaultDataDir(), "directory for the identity, bootstraps and state")
	fl.StringVar(&f.cfg.MetricsAddress, "metrics-address", "", "where the agent serves Prometheus metrics: a loopback host:port (default "+agent.DefaultMetricsAddress+"), or off; set it when several agents share a machine")
}

// prepare checks the join flags and returns the configuration they make.
func (f *installFlags) prepare() (agent.Config, error) {
	if len(f.servers) == 1 {
		f.cfg.Server = f.servers[0]
	} else {
		f.cfg.Servers = f.servers
	}
	cfg := f.cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	if _, err := agent.NewDriver(cfg); err != nil {
		return cfg, fmt.Errorf("--proxy: %w", err)
	}
	if _, err := agent.LoadIdentity(cfg.DataDir); err != nil && f.token == "" {
		return cfg, errors.New("--token is required: this machine is not enrolled yet (create a token with `osm-server token create` on the server)")
	}
	if f.token != "" && cfg.CACertHash == "" {
		return cfg, errors.New("--ca-cert-hash is required with --token: it pins the server for the first enrollment")
	}
	return cfg, nil
}

func newInstallCmd(stdout, stderr io.Writer) *cobra.Command {
	var f installFlags
	cmd := &cobra.Command{
		Use:   "install --server URL --token TOKEN --ca-cert-hash sha256:HEX --service NAME [--namespace NS]",
		Short: "Write the agent configuration and register the osm-agent system service",
		Long: `Write <config-dir>/agent.yaml, keep the join token (0600) in the data
directory for the first run, and register the osm-agent system service
(systemd: Restart=always after 2s, after network-online.target). Start it
with 'osm-agent start'. The token is used once: the service enrolls on its
first start and deletes it; later restarts and reboots do not need it.
With --enroll it enrolls at once instead (and keeps no token), so a bad
token or pin fails here.

Where the osm-agent package is installed, the package owns the unit
(/lib/systemd/system/osm-agent.service or /usr/lib/...): install then only
writes the configuration and the token, and the packaged unit, enabled at
package install, starts once the configuration exists.

Without the package, install refuses to run where no service manager is
running (a container); use 'osm-agent run' with the same flags there.`,
		Example: `  osm-agent install --server https://10.0.0.5:15443 --token 3f9c…e1 \
    --ca-cert-hash sha256:5b1e…07 --service bookstore --namespace default --app-port 8080`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			log, err := commandLogger(cmd, stderr)
			if err != nil {
				return err
			}
			return runInstall(cmd.Context(), log, stdout, f, "/")
		},
	}
	fl := cmd.Flags()
	f.register(fl)
	fl.StringVar(&f.configDir, "config-dir", agent.DefaultConfigDir(), "directory for agent.yaml")
	fl.BoolVar(&f.noService, "no-service", false, "write the configuration and token only, register no service (containers, your own supervisor)")
	fl.BoolVar(&f.enroll, "enroll", false, "enroll now with --token instead of at the service's first start")
	for _, name := range []string{"server", "service"} {
		_ = cmd.MarkFlagRequired(name)
	}
	return cmd
}

// runInstall installs under root ("/" but in tests).
func runInstall(ctx context.Context, log *slog.Logger, stdout io.Writer, f installFlags, root string) error {
	cfg, err := f.prepare()
	if err != nil {
		return err
	}
	configDir, err := filepath.Abs(f.configDir)
	if err != nil {
		return err
	}
	configPath := filepath.Join(configDir, agent.ConfigFile)
	token := f.token
	if f.enroll {
		if token == "" {
			return errors.New("--enroll needs --token")
		}
		join := meshclient.JoinRequest{Token: token, CACertHash: cfg.CACertHash, Service: mesh.MeshService{Namespace: cfg.Namespace, Name: cfg.Service}}
		if err := runEnroll(ctx, log, stdout, enrollConfig{join: join, servers: cfg.APIServers(), dataDir: cfg.DataDir, timeout: 30 * time.Second}); err != nil {
			return err
		}
		token = "" // spent: the identity is saved
	}
	if f.noService {
		if err := writeInstallFiles(configPath, cfg, token); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "Wrote %s (no service registered).\nRun the agent with: osm-agent run --config %s\n", configPath, configPath)
		return err
	}
	if unit, ok := agent.PackagedUnit(root); ok {
		if configPath != filepath.Join(agent.DefaultConfigDir(), agent.ConfigFile) {
			return fmt.Errorf("--config-dir %s: the osm-agent package's unit %s reads %s; keep the default, or pass --no-service and run the agent yourself", configDir, unit, defaultConfigPath())
		}
		if err := writeInstallFiles(configPath, cfg, token); err != nil {
			return err
		}
		_, err := fmt.Fprintf(stdout, "Wrote %s. The osm-agent package owns the unit %s (enabled at package install), so no unit was written.\n  data: %s\nStart it with: osm-agent start (systemctl start %s)\n", configPath, unit, cfg.DataDir, agent.ServiceName)
		return err
	}
	if err := agent.CheckServiceManager(); err != nil {
		return fmt.Errorf("install: %w (or pass --no-service to write the configuration only)", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	if exe, err = filepath.EvalSymlinks(exe); err != nil {
		return err
	}
	svc, err := agent.SystemService(agent.UnitSpec{Executable: exe, ConfigPath: configPath, DrainTimeout: cfg.DrainTimeout})
	if err != nil {
		return err
	}
	if err := writeInstallFiles(configPath, cfg, token); err != nil {
		return err
	}
	if err := svc.Install(); err != nil {
		return fmt.Errorf("register the %s service (%s): %w (run as root; `osm-agent uninstall` first to replace an existing one)", agent.ServiceName, svc.Platform(), err)
	}
	_, err = fmt.Fprintf(stdout, "Installed the %s service (%s).\n  config: %s\n  data:   %s\nStart it with: osm-agent start\n", agent.ServiceName, svc.Platform(), configPath, cfg.DataDir)
	return err
}

func writeInstallFiles(configPath string, cfg agent.Config, token string) error {
	if err := agent.WriteConfig(configPath, cfg); err != nil {
		return err
	}
	if token != "" {
		return agent.SaveJoinToken(cfg.DataDir, token)
	}
	return nil
}

// controlCmd builds start, stop and uninstall.
func newControlCmd(stdout io.Writer, use, short string, do func(service.Service) error, done string) *cobra.Command {
	return &cobra.Command{
		Use:   use,
		Short: short,
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if err := agent.CheckServiceManager(); err != nil {
				return fmt.Errorf("%s: %w", use, err)
			}
			svc, err := controlService()
			if err != nil {
				return err
			}
			if err := do(svc); err != nil {
				return fmt.Errorf("%s the %s service: %w (run as root; is it installed? `osm-agent install`)", use, agent.ServiceName, err)
			}
			_, err = fmt.Fprintln(stdout, done)
			return err
		},
	}
}

// controlService returns the service handle for control operations; the
// unit content does not matter for them.
func controlService() (service.Service, error) {
	return agent.SystemService(agent.UnitSpec{Executable: "/usr/bin/osm-agent", ConfigPath: defaultConfigPath()})
}

func newStatusCmd(stdout io.Writer) *cobra.Command {
	var configPath, dataDir string
	cmd := &cobra.Command{
		Use:   "status [--config FILE | --data-dir DIR]",
		Short: "Show the service state, the proxy certificate, Envoy's restarts and the last server contact",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !cmd.Flags().Changed("data-dir") {
				cfg, err := agent.LoadConfig(configPath)
				if err != nil {
					return fmt.Errorf("%w (or pass --data-dir)", err)
				}
				dataDir = cfg.DataDir
			}
			w := stdout
			if err := agent.CheckServiceManager(); err != nil {
				fmt.Fprintln(w, "service:  no service manager here")
			} else if svc, err := controlService(); err == nil {
				st, err := svc.Status()
				fmt.Fprintf(w, "service:  %s\n", serviceState(st, err))
			}
			st, err := agent.ReadStatus(dataDir)
			if err != nil {
				return err
			}
			printStatus(w, st, time.Now())
			return nil
		},
	}
	cmd.Flags().StringVar(&configPath, "config", defaultConfigPath(), "agent configuration file (for its data directory)")
	cmd.Flags().StringVar(&dataDir, "data-dir", agent.DefaultDataDir(), "agent data directory (instead of reading --config)")
	return cmd
}

func serviceState(st service.Status, err error) string {
	switch {
	case errors.Is(err, service.ErrNotInstalled):
		return "not installed (osm-agent install)"
	case err != nil:
		return "unknown: " + err.Error()
	case st == service.StatusRunning:
		return "running"
	case st == service.StatusStopped:
		return "stopped (osm-agent start)"
	}
	return "unknown"
}

func printStatus(w io.Writer, st agent.Status, now time.Time) {
	fmt.Fprintf(w, "identity: %s\n", orNone(st.Identity))
	if !st.CertificateExpires.IsZero() {
		fmt.Fprintf(w, "proxy certificate: expires %s (in %s)\n", st.CertificateExpires.Format(time.RFC3339), st.CertificateExpires.Sub(now).Round(time.Second))
	}
	if st.LastRenewError != "" {
		fmt.Fprintf(w, "  last renewal error: %s\n", st.LastRenewError)
	}
	fmt.Fprintf(w, "xDS server: %s\n", orNone(st.XDSAddress))
	if len(st.XDSServers) > 1 {
		fmt.Fprintf(w, "xDS servers (failover): %s\n", strings.Join(st.XDSServers, ", "))
	}
	if st.APIServer != "" {
		fmt.Fprintf(w, "API server (last answer): %s\n", st.APIServer)
	}
	p := st.Proxy
	state := "not running"
	if p.Running {
		state = fmt.Sprintf("running (pid %d since %s)", p.PID, p.StartedAt.Format(time.RFC3339))
	}
	if p.Driver == agent.ProxyNone {
		fmt.Fprintf(w, "proxy: none (proxyless: applications read %s)\n", agent.GRPCBootstrapFile)
	} else {
		fmt.Fprintf(w, "proxy (%s): %s, %d restarts\n", orNone(p.Driver), state, p.Restarts)
	}
	if p.LastExit != "" {
		fmt.Fprintf(w, "  last exit: %s at %s\n", p.LastExit, p.ExitedAt.Format(time.RFC3339))
	}
	if !st.LastConfig.IsZero() {
		fmt.Fprintf(w, "server config: last fetched %s, %d mesh host names\n", st.LastConfig.Format(time.RFC3339), st.Hosts)
	}
	if st.LastConfigError != "" {
		fmt.Fprintf(w, "  last error: %s\n", st.LastConfigError)
	}
	for _, p := range st.GatewayCertificateProblems {
		fmt.Fprintf(w, "gateway certificate problem: %s\n", p.Error)
	}
	fmt.Fprintf(w, "status written: %s\n", st.UpdatedAt.Format(time.RFC3339))
}

func orNone(s string) string {
	if s == "" {
		return "(none)"
	}
	return s
}
