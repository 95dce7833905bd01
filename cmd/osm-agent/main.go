// Command osm-agent runs on every machine of the mesh: it enrolls the
// machine with osm-server, keeps its proxy certificate renewed and runs the
// proxy. Each subcommand lives in its own file; main only builds the root
// command, the logger and the version.
//
// main parses flags once and wires library code; it holds no logic of its
// own.
package main

import (
	"io"
	"log/slog"
	"os"

	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() { cli.Main(newRootCmd(os.Stdout, os.Stderr)) }

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
		cli.VersionCommand("osm-agent", buildVersion(), stdout),
		newEnrollCmd(stdout, stderr),
	)
	root.AddCommand(agentCommands(stdout, stderr)...)
	return root
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
	return cli.NewLogger(w, format, level)
}

func buildVersion() string { return cli.Version(version) }
