// Command osm-server is the osm-vm control plane: it runs the endpoints
// provider plugins, keeps the mesh catalog, the mesh specification and the
// CA, and serves enrollment, the admin API, xDS and the debug API. Its admin
// subcommands are clients of a running server's API.
//
// main parses flags and configuration once and wires the components; it
// holds no logic of its own.
package main

import (
	"io"
	"os"

	"github.com/spf13/cobra"

	"github.com/osm-vm/osm-vm/internal/cli"
)

// version is set at build time with -ldflags "-X main.version=...".
var version = ""

func main() { cli.Main(newRootCmd(os.Stdout, os.Stderr)) }

func newRootCmd(stdout, stderr io.Writer) *cobra.Command {
	root := &cobra.Command{
		Use:           "osm-server",
		Short:         "The osm-vm control plane: service mesh for virtual machines and bare-metal servers",
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetOut(stdout)
	root.SetErr(stderr)
	root.AddCommand(newServeCmd(stderr), cli.VersionCommand("osm-server", buildVersion(), stdout),
		newApplyCmd(), newGetCmd(), newDeleteCmd(), newDiffCmd(),
		newTokenCmd(), newProxyCmd(), newCACmd())
	return root
}

func buildVersion() string { return cli.Version(version) }
