// Command bookstore is a proxyless gRPC demo server: an xDS-enabled gRPC
// server on -listen (the machine's advertise address and the service
// port) that sells books (bookstore.Bookstore/BuyBook answers with
// -name) and restocks each sold book from
// xds:///bookwarehouse.default.mesh:14001. Its inbound mTLS and RBAC come
// from the mesh: only service accounts a TrafficTarget allows get in.
// It reports its counts on stdout as JSON lines.
//
// Run it with GRPC_XDS_BOOTSTRAP pointing at the grpc-bootstrap.json the
// machine's osm-agent writes; the demo runs it twice, as bookstore-v1
// and bookstore-v2.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/examples/bookstore/bookapi"
)

func main() { bookapi.Main("bookstore", run) }

type store struct {
	name      string
	warehouse grpc.ClientConnInterface
	counts    *bookapi.Counters
	lastErr   *bookapi.LastError
}

func (s *store) BuyBook(ctx context.Context, title *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
	s.counts.Add("sold", 1)
	rctx, cancel := context.WithTimeout(ctx, time.Second)
	defer cancel()
	if _, err := bookapi.Call(rctx, s.warehouse, bookapi.RestockMethod, title.GetValue()); err != nil {
		s.counts.Add("restockErrors", 1)
		s.lastErr.Set(fmt.Errorf("restock: %w", err))
	} else {
		s.counts.Add("restocked", 1)
	}
	return wrapperspb.String(s.name), nil
}

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bookstore", flag.ContinueOnError)
	listen := fs.String("listen", "127.0.10.3:14001", "address to serve on: the machine's advertise address and the service port")
	name := fs.String("name", "bookstore-v1", "the name BuyBook answers with")
	warehouse := fs.String("warehouse", bookapi.BookwarehouseTarget, "the warehouse to restock from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn, err := bookapi.DialMesh(*warehouse)
	if err != nil {
		return err
	}
	defer conn.Close()
	s := &store{name: *name, warehouse: conn, counts: &bookapi.Counters{}, lastErr: &bookapi.LastError{}}

	var wg sync.WaitGroup
	rctx, cancel := context.WithCancel(ctx)
	wg.Go(func() { bookapi.Report(rctx, os.Stdout, *name, s.counts, s.lastErr.Get, 500*time.Millisecond) })
	defer func() { cancel(); wg.Wait() }()
	return bookapi.Serve(ctx, *listen, func(r grpc.ServiceRegistrar) { r.RegisterService(&bookapi.BookstoreDesc, s) })
}
