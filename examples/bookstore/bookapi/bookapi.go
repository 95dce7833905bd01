// Package bookapi is the tiny gRPC API of the bookstore demo applications
// (bookbuyer, bookthief, bookstore, bookwarehouse), written without protoc:
// hand-written grpc.ServiceDescs whose methods take and return
// wrapperspb.StringValue, and the proxyless mesh plumbing every demo app
// shares (xDS credentials, an xDS-enabled server, stats lines on stdout).
//
// The apps find each other only through gRPC's xDS resolver, configured by
// the grpc-bootstrap.json osm-agent writes (GRPC_XDS_BOOTSTRAP must point
// at it in the app's environment: gRPC reads it when the process starts),
// and get mTLS from the agent's service certificate files through the
// bootstrap's "osm" file_watcher certificate provider.
//
// It imports nothing of osm-vm: the apps are ordinary gRPC programs.
package bookapi

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// Full method names: the mesh policies (examples/bookstore/grpc.yaml)
// match these paths.
const (
	BuyBookMethod = "/bookstore.Bookstore/BuyBook"
	RestockMethod = "/bookwarehouse.Warehouse/Restock"
)

// Targets of the mesh services the apps call, resolved by the xDS resolver.
const (
	BookstoreTarget     = "xds:///bookstore.default.mesh:14001"
	BookwarehouseTarget = "xds:///bookwarehouse.default.mesh:14001"
)

// Bookstore sells books: BuyBook answers with the selling bookstore's name
// (bookstore-v1 or bookstore-v2).
type Bookstore interface {
	BuyBook(ctx context.Context, title *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

// Warehouse restocks bookstores: Restock answers with the warehouse's name.
type Warehouse interface {
	Restock(ctx context.Context, title *wrapperspb.StringValue) (*wrapperspb.StringValue, error)
}

// BookstoreDesc is the service bookstore.Bookstore.
var BookstoreDesc = grpc.ServiceDesc{
	ServiceName: "bookstore.Bookstore",
	HandlerType: (*Bookstore)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "BuyBook",
		Handler: unary(BuyBookMethod, func(srv any, ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return srv.(Bookstore).BuyBook(ctx, in)
		}),
	}},
}

// WarehouseDesc is the service bookwarehouse.Warehouse.
var WarehouseDesc = grpc.ServiceDesc{
	ServiceName: "bookwarehouse.Warehouse",
	HandlerType: (*Warehouse)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Restock",
		Handler: unary(RestockMethod, func(srv any, ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error) {
			return srv.(Warehouse).Restock(ctx, in)
		}),
	}},
}

type handlerFunc func(srv any, ctx context.Context, in *wrapperspb.StringValue) (*wrapperspb.StringValue, error)

// unary adapts f to a grpc.MethodDesc handler, as protoc-gen-go-grpc would.
func unary(fullMethod string, f handlerFunc) func(any, context.Context, func(any) error, grpc.UnaryServerInterceptor) (any, error) {
	return func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
		in := new(wrapperspb.StringValue)
		if err := dec(in); err != nil {
			return nil, err
		}
		if interceptor == nil {
			return f(srv, ctx, in)
		}
		info := &grpc.UnaryServerInfo{Server: srv, FullMethod: fullMethod}
		return interceptor(ctx, in, info, func(ctx context.Context, req any) (any, error) {
			return f(srv, ctx, req.(*wrapperspb.StringValue))
		})
	}
}

// Call invokes a unary method with a StringValue on conn.
func Call(ctx context.Context, conn grpc.ClientConnInterface, method, arg string) (string, error) {
	out := new(wrapperspb.StringValue)
	if err := conn.Invoke(ctx, method, wrapperspb.String(arg), out); err != nil {
		return "", err
	}
	return out.GetValue(), nil
}

// DialMesh returns a client of a mesh service (an xds:/// target) with
// the mTLS the xDS server's cluster configuration asks for.
func DialMesh(target string) (*grpc.ClientConn, error) {
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return nil, fmt.Errorf("xDS client credentials: %w", err)
	}
	conn, err := grpc.NewClient(target, grpc.WithTransportCredentials(creds))
	if err != nil {
		return nil, fmt.Errorf("dial %s: %w (is GRPC_XDS_BOOTSTRAP set to the agent's grpc-bootstrap.json?)", target, err)
	}
	return conn, nil
}

// ServingMarker is the line Serve writes to stderr once the xDS server's
// listener arrived and it serves (before that it closes connections): the
// demo starts the callers after it.
const ServingMarker = "xDS serving mode: SERVING"

// Serve runs an xDS-enabled gRPC server on addr until ctx is done: the xDS
// server's listener for addr gives it its mTLS and inbound RBAC, so the
// mesh policy is enforced here, in the application. register adds the
// services.
func Serve(ctx context.Context, addr string, register func(grpc.ServiceRegistrar)) error {
	creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		return fmt.Errorf("xDS server credentials: %w", err)
	}
	srv, err := xds.NewGRPCServer(grpc.Creds(creds), xds.ServingModeCallback(func(a net.Addr, args xds.ServingModeChangeArgs) {
		if args.Mode == connectivity.ServingModeServing {
			fmt.Fprintf(os.Stderr, "%s on %s\n", ServingMarker, a)
		} else {
			fmt.Fprintf(os.Stderr, "xDS serving mode: %s on %s: %v\n", args.Mode, a, args.Err)
		}
	}))
	if err != nil {
		return fmt.Errorf("xDS-enabled gRPC server: %w (is GRPC_XDS_BOOTSTRAP set to the agent's grpc-bootstrap.json?)", err)
	}
	register(srv)
	lis, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("listen on %s: %w", addr, err)
	}
	var wg sync.WaitGroup
	errc := make(chan error, 1)
	wg.Go(func() { errc <- srv.Serve(lis) })
	select {
	case <-ctx.Done():
		srv.Stop()
		wg.Wait()
		return nil
	case err := <-errc:
		wg.Wait()
		return fmt.Errorf("serve on %s: %w", addr, err)
	}
}

// Counters is a set of named counts an app reports.
type Counters struct {
	mu sync.Mutex
	m  map[string]int64
}

// Add adds n to the count name.
func (c *Counters) Add(name string, n int64) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.m == nil {
		c.m = map[string]int64{}
	}
	c.m[name] += n
}

// Snapshot returns a copy of the counts.
func (c *Counters) Snapshot() map[string]int64 {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make(map[string]int64, len(c.m))
	for k, v := range c.m {
		out[k] = v
	}
	return out
}

// Stats is one line an app prints on stdout: its cumulative counts and
// its last error. The demo orchestrator reads these lines.
type Stats struct {
	App       string           `json:"app"`
	Counts    map[string]int64 `json:"counts"`
	LastError string           `json:"lastError,omitempty"`
}

// Report writes c as a Stats line to w every interval until ctx is done,
// and once more at the end.
func Report(ctx context.Context, w io.Writer, app string, c *Counters, lastErr func() string, interval time.Duration) {
	enc := json.NewEncoder(w)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		_ = enc.Encode(Stats{App: app, Counts: c.Snapshot(), LastError: lastErr()})
		select {
		case <-ctx.Done():
			_ = enc.Encode(Stats{App: app, Counts: c.Snapshot(), LastError: lastErr()})
			return
		case <-t.C:
		}
	}
}

// LastError keeps the most recent error message.
type LastError struct {
	mu  sync.Mutex
	msg string
}

// Set records err (nil is ignored).
func (l *LastError) Set(err error) {
	if err == nil {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msg = err.Error()
}

// Get returns the last error message.
func (l *LastError) Get() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.msg
}

// Main runs an app's run function with its arguments and a context that
// SIGINT and SIGTERM cancel, and exits with status 1 after printing
// "<name>: <error>" when it fails.
func Main(name string, run func(ctx context.Context, args []string) error) {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := run(ctx, os.Args[1:])
	stop()
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", name, err)
		os.Exit(1)
	}
}
