// Command bookbuyer is a proxyless gRPC demo client: it buys books from
// xds:///bookstore.default.mesh:14001 in a loop and reports on stdout, as
// JSON lines, how many sales each bookstore version made. The mesh's
// TrafficSplit decides which version sells (80/20 in the demo).
//
// Run it with GRPC_XDS_BOOTSTRAP pointing at the grpc-bootstrap.json the
// bookbuyer machine's osm-agent writes.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"strings"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/examples/bookstore/bookapi"
)

func main() { bookapi.Main("bookbuyer", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bookbuyer", flag.ContinueOnError)
	interval := fs.Duration("interval", 50*time.Millisecond, "time between purchases")
	target := fs.String("target", bookapi.BookstoreTarget, "the bookstore to buy from")
	if err := fs.Parse(args); err != nil {
		return err
	}
	conn, err := bookapi.DialMesh(*target)
	if err != nil {
		return err
	}
	defer conn.Close()

	var (
		counts  bookapi.Counters
		lastErr bookapi.LastError
		wg      sync.WaitGroup
	)
	rctx, cancel := context.WithCancel(ctx)
	wg.Go(func() { bookapi.Report(rctx, os.Stdout, "bookbuyer", &counts, lastErr.Get, 500*time.Millisecond) })
	defer func() { cancel(); wg.Wait() }()

	t := time.NewTicker(*interval)
	defer t.Stop()
	for n := 1; ; n++ {
		cctx, ccancel := context.WithTimeout(ctx, 2*time.Second)
		seller, err := bookapi.Call(cctx, conn, bookapi.BuyBookMethod, fmt.Sprintf("book-%d", n))
		ccancel()
		switch {
		case ctx.Err() != nil:
			return nil
		case err != nil:
			counts.Add("errors", 1)
			lastErr.Set(err)
		default:
			// "bookstore-v1" counts as "v1".
			counts.Add(seller[strings.LastIndexByte(seller, '-')+1:], 1)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}
