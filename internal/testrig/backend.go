package testrig

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"golang.org/x/sync/errgroup"
	"google.golang.org/grpc"
	"google.golang.org/grpc/connectivity"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
	"google.golang.org/grpc/xds"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// BackendOptions configure a Backend.
type BackendOptions struct {
	// Name is the instance's name, in every answer.
	Name string
	// GRPC is the gRPC server's address: for a mesh endpoint, the
	// machine's advertise address and the Service's port.
	GRPC string
	// XDS makes the gRPC server xDS-enabled: its listener, mTLS and
	// inbound RBAC come from the mesh (GRPC_XDS_BOOTSTRAP must point at
	// the machine's osm-agent's grpc-bootstrap.json). Without it the
	// server is plain gRPC (an Envoy sidecar's application, a unit test).
	XDS bool
	// HTTP, when set, is the address of an HTTP/1.1 server with the same
	// behaviour: any path, 200 with the name, failures with HTTPStatus.
	HTTP string
	// Control is the address of the control endpoint: PUT /behaviour
	// (a Behaviour), GET /state (the State).
	Control string
	Logger  *slog.Logger
}

// Backend is the rig's backend. Create it with NewBackend, run it with Run.
type Backend struct {
	o   BackendOptions
	log *slog.Logger

	setMu sync.Mutex // serializes set
	mu    sync.Mutex
	beh   Behaviour
	// changed is closed at the next set: it releases the hanging calls.
	changed chan struct{}
	gates   []*gate

	serving                 atomic.Bool
	inFlight, calls, failed atomic.Int64
}

// NewBackend checks o and returns the backend, healthy.
func NewBackend(o BackendOptions) (*Backend, error) {
	switch {
	case o.Name == "":
		return nil, errors.New("backend: no name: every answer names its instance")
	case o.GRPC == "":
		return nil, errors.New("backend: no gRPC address")
	case o.Control == "":
		return nil, errors.New("backend: no control address")
	case o.Logger == nil:
		return nil, errors.New("backend: no logger")
	}
	return &Backend{o: o, log: o.Logger.With("backend", o.Name), changed: make(chan struct{})}, nil
}

// grpcServer is what Run needs of grpc.Server and xds.GRPCServer.
type grpcServer interface {
	grpc.ServiceRegistrar
	Serve(net.Listener) error
	Stop()
}

// Run listens and serves until ctx is done.
func (b *Backend) Run(ctx context.Context) error {
	var srv grpcServer
	if b.o.XDS {
		creds, err := xdscreds.NewServerCredentials(xdscreds.ServerOptions{FallbackCreds: insecure.NewCredentials()})
		if err != nil {
			return fmt.Errorf("xDS server credentials: %w", err)
		}
		srv, err = xds.NewGRPCServer(grpc.Creds(creds), xds.ServingModeCallback(func(a net.Addr, args xds.ServingModeChangeArgs) {
			b.serving.Store(args.Mode == connectivity.ServingModeServing)
			b.log.Info("xDS serving mode", "mode", args.Mode, "addr", a, "err", args.Err)
		}))
		if err != nil {
			return fmt.Errorf("xDS-enabled gRPC server: %w (is GRPC_XDS_BOOTSTRAP set to the agent's grpc-bootstrap.json?)", err)
		}
	} else {
		srv = grpc.NewServer()
		b.serving.Store(true)
	}
	defer srv.Stop()

	grpcGate, err := listenGate(b.o.GRPC)
	if err != nil {
		return err
	}
	b.gates = append(b.gates, grpcGate)
	var httpGate *gate
	if b.o.HTTP != "" {
		if httpGate, err = listenGate(b.o.HTTP); err != nil {
			grpcGate.Close()
			return err
		}
		b.gates = append(b.gates, httpGate)
	}
	ctl, err := net.Listen("tcp", b.o.Control)
	if err != nil {
		for _, g := range b.gates {
			g.Close()
		}
		return fmt.Errorf("control endpoint: %w", err)
	}

	srv.RegisterService(&backendDesc, b)
	httpSrv := &http.Server{Handler: http.HandlerFunc(b.serveHTTP), ReadHeaderTimeout: 10 * time.Second}
	ctlSrv := &http.Server{Handler: b.controlHandler(), ReadHeaderTimeout: 10 * time.Second}
	b.log.Info("serving", "grpc", b.o.GRPC, "xds", b.o.XDS, "http", b.o.HTTP, "control", ctl.Addr())

	g, gctx := errgroup.WithContext(ctx)
	g.Go(func() error { return srv.Serve(grpcGate) })
	if httpGate != nil {
		g.Go(func() error { return ignoreClosed(httpSrv.Serve(httpGate)) })
	}
	g.Go(func() error { return ignoreClosed(ctlSrv.Serve(ctl)) })
	g.Go(func() error {
		<-gctx.Done()
		srv.Stop()
		httpSrv.Close()
		ctlSrv.Close()
		for _, gt := range b.gates {
			gt.Close()
		}
		return nil
	})
	err = g.Wait()
	if ctx.Err() != nil {
		return nil
	}
	return err
}

func ignoreClosed(err error) error {
	if errors.Is(err, http.ErrServerClosed) {
		return nil
	}
	return err
}

// current returns the behaviour and the channel its change closes.
func (b *Backend) current() (Behaviour, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.beh, b.changed
}

// set makes beh the behaviour: it closes the listeners for Refuse (and
// opens them again without), and releases the hanging calls.
func (b *Backend) set(beh Behaviour) error {
	b.setMu.Lock()
	defer b.setMu.Unlock()
	if !beh.Refuse {
		for _, g := range b.gates {
			if err := g.open(); err != nil {
				return err
			}
		}
	}
	b.mu.Lock()
	b.beh = beh
	close(b.changed)
	b.changed = make(chan struct{})
	b.mu.Unlock()
	if beh.Refuse {
		for _, g := range b.gates {
			g.refuse()
		}
	}
	b.log.Info("behaviour", "behaviour", beh)
	return nil
}

// State returns the backend's state now.
func (b *Backend) State() State {
	beh, _ := b.current()
	return State{Name: b.o.Name, Behaviour: beh, Serving: b.serving.Load() && !beh.Refuse,
		InFlight: b.inFlight.Load(), Calls: b.calls.Load(), Failed: b.failed.Load()}
}

// failure is a call failed on purpose.
type failure struct {
	err    error // the gRPC status
	status int   // the HTTP status
	msg    string
}

// answer decides one call: nil to answer it, the failure to give, or
// ctx's error when the caller gave up first.
func (b *Backend) answer(ctx context.Context) (*failure, error) {
	b.calls.Add(1)
	b.inFlight.Add(1)
	defer b.inFlight.Add(-1)
	beh, changed := b.current()
	for beh.Hang {
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-changed:
		}
		beh, changed = b.current()
	}
	if d := time.Duration(beh.Delay); d > 0 {
		t := time.NewTimer(d)
		defer t.Stop()
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-t.C:
		}
	}
	if beh.Fail > 0 && rand.Float64() < beh.Fail {
		b.failed.Add(1)
		code, _ := beh.code() // checked by set's caller
		msg := fmt.Sprintf("testrig backend %s fails %v of its calls", b.o.Name, beh.Fail)
		return &failure{err: status.Error(code, msg), status: beh.httpStatus(), msg: msg}, nil
	}
	return nil, nil
}

// backendDesc is the service testrig.Backend, written without protoc.
var backendDesc = grpc.ServiceDesc{
	ServiceName: Service,
	HandlerType: (*any)(nil),
	Methods: []grpc.MethodDesc{{
		MethodName: "Call",
		Handler: func(srv any, ctx context.Context, dec func(any) error, interceptor grpc.UnaryServerInterceptor) (any, error) {
			in := new(wrapperspb.StringValue)
			if err := dec(in); err != nil {
				return nil, err
			}
			call := func(ctx context.Context, _ any) (any, error) { return srv.(*Backend).call(ctx) }
			if interceptor == nil {
				return call(ctx, in)
			}
			// The xDS-enabled server's interceptors (routing, RBAC) run here.
			return interceptor(ctx, in, &grpc.UnaryServerInfo{Server: srv, FullMethod: Method}, call)
		},
	}},
}

func (b *Backend) call(ctx context.Context) (*wrapperspb.StringValue, error) {
	grpc.SetTrailer(ctx, metadata.Pairs(FromKey, b.o.Name))
	f, err := b.answer(ctx)
	switch {
	case err != nil:
		return nil, status.FromContextError(err).Err()
	case f != nil:
		return nil, f.err
	}
	return wrapperspb.String(b.o.Name), nil
}

func (b *Backend) serveHTTP(w http.ResponseWriter, r *http.Request) {
	w.Header().Set(FromKey, b.o.Name)
	f, err := b.answer(r.Context())
	switch {
	case err != nil:
		return // the caller is gone
	case f != nil:
		http.Error(w, f.msg, f.status)
		return
	}
	fmt.Fprintln(w, b.o.Name)
}

func (b *Backend) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(b.State())
	})
	mux.HandleFunc("PUT /behaviour", func(w http.ResponseWriter, r *http.Request) {
		var beh Behaviour
		dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 1<<16))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&beh); err != nil {
			http.Error(w, "behaviour: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := beh.Check(); err != nil {
			http.Error(w, "behaviour: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := b.set(beh); err != nil {
			http.Error(w, "behaviour: "+err.Error(), http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(b.State())
	})
	return mux
}

// gate is a listener whose socket a test closes and opens again on the
// same address (Behaviour.Refuse): while closed, connections are refused
// and Accept waits; closing also closes every connection it accepted.
type gate struct {
	addr *net.TCPAddr
	done chan struct{}

	mu     sync.Mutex
	lis    net.Listener // nil while refusing
	opened chan struct{}
	conns  map[*gateConn]struct{}
	closed bool
}

func listenGate(addr string) (*gate, error) {
	l, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("listen on %s: %w", addr, err)
	}
	opened := make(chan struct{})
	close(opened)
	return &gate{addr: l.Addr().(*net.TCPAddr), done: make(chan struct{}), lis: l, opened: opened, conns: map[*gateConn]struct{}{}}, nil
}

func (g *gate) Accept() (net.Conn, error) {
	for {
		g.mu.Lock()
		l, opened, closed := g.lis, g.opened, g.closed
		g.mu.Unlock()
		if closed {
			return nil, net.ErrClosed
		}
		if l == nil {
			select {
			case <-opened:
			case <-g.done:
			}
			continue
		}
		c, err := l.Accept()
		g.mu.Lock()
		current := g.lis == l && !g.closed
		if err == nil && current {
			gc := &gateConn{Conn: c, g: g}
			g.conns[gc] = struct{}{}
			g.mu.Unlock()
			return gc, nil
		}
		g.mu.Unlock()
		switch {
		case err == nil:
			c.Close() // accepted as the gate closed
		case current:
			return nil, err
		}
	}
}

// refuse closes the socket and every accepted connection.
func (g *gate) refuse() {
	g.mu.Lock()
	if g.lis != nil {
		g.lis.Close()
		g.lis = nil
		g.opened = make(chan struct{})
	}
	conns := g.conns
	g.conns = map[*gateConn]struct{}{}
	g.mu.Unlock()
	for c := range conns {
		c.Conn.Close()
	}
}

// open listens again on the gate's address.
func (g *gate) open() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.lis != nil || g.closed {
		return nil
	}
	l, err := net.Listen("tcp", g.addr.String())
	if err != nil {
		return fmt.Errorf("listen again on %s: %w", g.addr, err)
	}
	g.lis = l
	close(g.opened)
	return nil
}

func (g *gate) Close() error {
	g.mu.Lock()
	if g.closed {
		g.mu.Unlock()
		return nil
	}
	g.closed = true
	close(g.done)
	l := g.lis
	g.lis = nil
	conns := g.conns
	g.conns = map[*gateConn]struct{}{}
	g.mu.Unlock()
	if l != nil {
		l.Close()
	}
	for c := range conns {
		c.Conn.Close()
	}
	return nil
}

func (g *gate) Addr() net.Addr { return g.addr }

type gateConn struct {
	net.Conn
	g *gate
}

func (c *gateConn) Close() error {
	c.g.mu.Lock()
	delete(c.g.conns, c)
	c.g.mu.Unlock()
	return c.Conn.Close()
}
