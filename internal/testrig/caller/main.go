// Command caller is the resilience test rig's caller in Go (gRPC-Go): it
// calls testrig.Backend/Call on an xds:/// target through the mesh and
// writes one JSON line per call ({"ok", "code", "from", "error", "ms"},
// testrig.Result). With -n it makes one batch and exits; without, it
// reads testrig.Batch lines on stdin and runs each as it arrives.
//
// It knows nothing of osm-vm: GRPC_XDS_BOOTSTRAP points at the
// grpc-bootstrap.json osm-agent writes, and xDS channel credentials take
// mTLS from the cluster configuration.
//
//	caller -target xds:///flaky.default.mesh:14001 -n 100 -c 4 -deadline 10s
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	_ "google.golang.org/grpc/xds" // the xds:/// resolver and balancers

	"github.com/osm-vm/osm-vm/internal/testrig"
)

func main() { testrig.Main("caller", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("caller", flag.ContinueOnError)
	target := fs.String("target", "xds:///flaky.default.mesh:14001", "the service to call")
	var b testrig.Batch
	fs.IntVar(&b.N, "n", 0, "make this many calls and exit (0: read batches on stdin)")
	fs.IntVar(&b.Concurrency, "c", 1, "calls at once")
	deadline := fs.Duration("deadline", 10*time.Second, "each call's deadline")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if os.Getenv("GRPC_XDS_BOOTSTRAP") == "" {
		return fmt.Errorf("GRPC_XDS_BOOTSTRAP is not set: point it at the osm-agent's grpc-bootstrap.json")
	}
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return fmt.Errorf("xDS client credentials: %w", err)
	}
	conn, err := grpc.NewClient(*target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("dial %s: %w", *target, err)
	}
	defer conn.Close()
	if b.N == 0 {
		return testrig.ServeBatches(ctx, conn, os.Stdin, os.Stdout)
	}
	b.DeadlineMS = int(deadline.Milliseconds())
	if err := b.Check(); err != nil {
		return err
	}
	var mu sync.Mutex
	enc := json.NewEncoder(os.Stdout)
	testrig.CallBatch(ctx, conn, b, func(r testrig.Result) { mu.Lock(); enc.Encode(r); mu.Unlock() })
	return nil
}
