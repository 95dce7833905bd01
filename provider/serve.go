package provider

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"time"

	"github.com/hashicorp/go-plugin"
)

// PluginName is the name under which the provider is dispensed.
const PluginName = "provider"

// Handshake is the go-plugin handshake between osm-server and provider
// plugins. ProtocolVersion changes only with a new proto package
// (provider.v2); a plugin built for another version is refused at start
// with an error naming both versions.
var Handshake = plugin.HandshakeConfig{
	ProtocolVersion:  1,
	MagicCookieKey:   "OSM_VM_PROVIDER_PLUGIN",
	MagicCookieValue: "5c1f0e7a9b2d4e6f8a0c3b5d7e9f1a2c",
}

// PluginSet is the plugin map for go-plugin clients (hosts and tests).
func PluginSet() plugin.PluginSet {
	return plugin.PluginSet{PluginName: &grpcPlugin{}}
}

// Dispense returns the Provider of a started plugin client.
func Dispense(c *plugin.Client) (Provider, error) {
	rpc, err := c.Client()
	if err != nil {
		return nil, fmt.Errorf("connect to plugin: %w", err)
	}
	raw, err := rpc.Dispense(PluginName)
	if err != nil {
		return nil, fmt.Errorf("dispense %q from plugin: %w", PluginName, err)
	}
	p, ok := raw.(Provider)
	if !ok {
		return nil, fmt.Errorf("plugin dispensed %T, not a provider", raw)
	}
	return p, nil
}

// ClientConfig returns a go-plugin client configuration for the provider
// executable run by cmd: gRPC only, AutoMTLS on, this package's handshake.
// The caller may add SecureConfig, Logger and Stderr.
func ClientConfig(cmd *exec.Cmd) *plugin.ClientConfig {
	return &plugin.ClientConfig{
		HandshakeConfig:  Handshake,
		Plugins:          PluginSet(),
		Cmd:              cmd,
		AllowedProtocols: []plugin.Protocol{plugin.ProtocolGRPC},
		AutoMTLS:         true,
	}
}

// Serve runs p as a plugin until the host goes away. Call it from main and
// write nothing to stdout before it: go-plugin owns stdout. Log to stderr
// (Logger does): the host re-logs every line under the instance's name.
//
// Run directly by a person rather than by osm-server, Serve prints how the
// plugin is meant to be used and exits with status 1.
func Serve(p Provider) {
	if os.Getenv(Handshake.MagicCookieKey) != Handshake.MagicCookieValue {
		fmt.Fprintf(os.Stderr, "This is an osm-vm endpoints-provider plugin. Put it in osm-server's plugin directory\n"+
			"and name it in a `providers:` entry of the server config; osm-server starts it.\n")
		os.Exit(1)
	}
	go exitWithParent(Logger())
	plugin.Serve(&plugin.ServeConfig{
		HandshakeConfig: Handshake,
		Plugins:         plugin.PluginSet{PluginName: &grpcPlugin{impl: p}},
		GRPCServer:      plugin.DefaultGRPCServer,
	})
}

// Logger returns a JSON logger on stderr. The host parses its lines and
// re-logs them with their level and attributes under the instance's name.
func Logger() *slog.Logger {
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// exitWithParent ends the plugin when its host dies without killing it
// (the host's Pdeathsig covers Linux; this covers the rest and the
// thread-exit corner of Pdeathsig).
func exitWithParent(log *slog.Logger) {
	parent := os.Getppid()
	for range time.Tick(time.Second) {
		if os.Getppid() != parent {
			log.Error("osm-server went away; provider plugin exiting", "error", errors.New("parent process changed"))
			os.Exit(2)
		}
	}
}
