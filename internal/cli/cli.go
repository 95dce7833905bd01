// Package cli holds what osm-vm's commands (osm-server, osm-agent) share
// at their edge: running the root command, the process logger from
// --log-format and --log-level, and the build version. It imports nothing
// of osm-vm.
package cli

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"runtime/debug"
	"syscall"

	"github.com/spf13/cobra"
)

// Main runs root with a context that SIGINT and SIGTERM cancel, and exits
// with status 1 after printing "<root name>: <error>" when it fails.
func Main(root *cobra.Command) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := root.ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", root.Name(), err)
		os.Exit(1)
	}
}

// VersionCommand returns the `version` subcommand of the command name: it
// prints "<name> <version>" on stdout.
func VersionCommand(name, version string, stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the " + name + " version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(stdout, "%s %s\n", name, version)
			return err
		},
	}
}

// NewLogger returns the process logger for --log-format (text or json) and
// --log-level (debug, info, warn or error).
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// Version returns set (the version given at build time with -ldflags
// "-X main.version=..."), else the module version, else "dev".
func Version(set string) string {
	if set != "" {
		return set
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
