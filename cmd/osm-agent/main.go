// Command osm-agent runs on every machine of the mesh: it enrolls the
// machine with osm-server, keeps its proxy certificate renewed and runs the
// proxy. Each subcommand lives in its own file; main only builds the root
// command, the logger and the version.
//
// main parses flags once and wires library code; it holds no logic of its
// own.
package main

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

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "osm-agent:", err)
		os.Exit(1)
	}
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "osm-agent",
		Short:         "The osm-vm agent: joins this machine to the service mesh and runs its proxy",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.PersistentFlags().String("log-format", "text", "log format: text or json")
	root.PersistentFlags().String("log-level", "info", "log level: debug, info, warn or error")
	root.AddCommand(
		newVersionCmd(stdout),
		newEnrollCmd(stdout, stderr),
	)
	root.AddCommand(agentCommands(stdout, stderr)...)
	return root
}

func newVersionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the osm-agent version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(stdout, "osm-agent %s\n", buildVersion())
			return err
		},
	}
}

func buildVersion() string {
	if version != "" {
		return version
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}

// commandLogger returns the logger for the root's --log-format and
// --log-level, writing to w.
func commandLogger(cmd *cobra.Command, w io.Writer) (*slog.Logger, error) {
	format, err := cmd.Flags().GetString("log-format")
	if err != nil {
		return nil, err
	}
	level, err := cmd.Flags().GetString("log-level")
	if err != nil {
		return nil, err
	}
	return newLogger(w, format, level)
}

// newLogger returns the process logger for --log-format and --log-level.
func newLogger(w io.Writer, format, level string) (*slog.Logger, error) {
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
