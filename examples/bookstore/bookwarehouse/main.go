// Command bookwarehouse is a proxyless gRPC demo server: an xDS-enabled
// gRPC server on -listen whose bookwarehouse.Warehouse/Restock only the
// bookstore service account may call (the mesh's TrafficTarget, enforced
// here). It reports its counts on stdout as JSON lines.
//
// Run it with GRPC_XDS_BOOTSTRAP pointing at the grpc-bootstrap.json the
// machine's osm-agent writes.
package main

import (
	"context"
	"flag"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/examples/bookstore/bookapi"
)

func main() { bookapi.Main("bookwarehouse", run) }

type warehouse struct{ counts *bookapi.Counters }

func (w *warehouse) Restock(context.Context, *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	w.counts.Add("restocked", 1)
	return wrapperspb.String("bookwarehouse"), nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bookwarehouse", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.10.5:14001", "address to serve on: the machine's advertise address and the service port")
	if err := fs.Parse(args); err != nil {
		return err
	}
	w := &warehouse{counts: &bookapi.Counters{}}
	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(ctx)
	wg.Go(func() {
		bookapi.Report(rctx, os.Stdout, "bookwarehouse", w.counts, func() string { return "" }, 500*time.Millisecond)
	})
	defer func() { cancel(); wg.Wait() }()
	return bookapi.Serve(ctx, *listen, func(r grpc.ServiceRegistrar) { r.RegisterService(&bookapi.WarehouseDesc, w) })
}
