// Command osm-server is the osm-vm control plane: it runs the endpoints
// provider plugins, keeps the mesh catalog and serves the debug API (later
// issues add the CA, the mesh specification and xDS). Its admin subcommands
// are clients of a running server's API.
//
// main parses flags and configuration once and wires the components; it
// holds no logic of its own.
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := newRootCmd(os.Stdout, os.Stderr).ExecuteContext(ctx)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "osm-server:", err)
		os.Exit(1)
	}
}

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "osm-server",
		Short:         "The osm-vm control plane: service mesh for virtual machines and bare-metal servers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServeCmd(stderr), newVersionCmd(stdout),
		newApplyCmd(), newGetCmd(), newDeleteCmd(), newDiffCmd(),
		newTokenCmd(), newProxyCmd(), newCACmd())
	return root
}

func newVersionCmd(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the osm-server version",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			_, err := fmt.Fprintf(stdout, "osm-server %s\n", buildVersion())
			return err
		},
	}
}

func buildVersion() string { return cli.Version(version) }
