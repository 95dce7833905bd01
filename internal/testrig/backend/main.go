// Command backend is the resilience test rig's backend (package testrig):
// a gRPC server of testrig.Backend/Call, and optionally an HTTP/1.1 server,
// whose behaviour (healthy, slow, hanging, failing, refusing connections)
// a test sets on its control endpoint.
//
// As a mesh endpoint it runs as examples/bookstore's servers do: on the
// machine's advertise address and the Service's port, xDS-enabled
// (-xds, the default), with GRPC_XDS_BOOTSTRAP pointing at the machine's
// osm-agent's grpc-bootstrap.json.
//
//	backend -name flaky-1 -listen 127.0.32.10:14001 -control 127.0.0.1:17001
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"

	"github.com/osm-vm/osm-vm/internal/testrig"
)

func main() { testrig.Main("backend", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("backend", flag.ContinueOnError)
	var o testrig.BackendOptions
	fs.StringVar(&o.Name, "name", "", "the instance's name, in every answer (required)")
	fs.StringVar(&o.GRPC, "listen", "", "the gRPC server's address: the machine's advertise address and the Service's port (required)")
	fs.BoolVar(&o.XDS, "xds", true, "an xDS-enabled gRPC server (mTLS and RBAC from the mesh; needs GRPC_XDS_BOOTSTRAP)")
	fs.StringVar(&o.HTTP, "http", "", "an HTTP/1.1 server's address (none when empty)")
	fs.StringVar(&o.Control, "control", "", "the control endpoint's address (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if o.XDS && os.Getenv("GRPC_XDS_BOOTSTRAP") == "" {
		return fmt.Errorf("-xds: GRPC_XDS_BOOTSTRAP is not set: point it at the osm-agent's grpc-bootstrap.json, or run with -xds=false")
	}
	o.Logger = slog.New(slog.NewTextHandler(os.Stderr, nil))
	b, err := testrig.NewBackend(o)
	if err != nil {
		return err
	}
	return b.Run(ctx)
}
