// Package peer runs the servers the harness measures, each in a process
// of its own: O, osm-server itself fed through its static provider, spec
// API and enrollment API as osm-agent is; and L, L-mux and F, the peer
// servers (go-control-plane's SnapshotCache, its MuxCache with a
// LinearCache for EDS, and a floor that writes the same marshalled bytes
// to every stream), served by `osm-bench serve-l|serve-f` (Serve). A
// started server is a Server: its process, where the fleet reaches it,
// and how to change, restart and profile it. Of osm-vm it imports only
// the wire and client packages an agent uses (internal/mesh,
// internal/meshapi, internal/meshclient) and internal/testaddr; only the
// peer servers link go-control-plane's caches and server.
package peer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"

	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	gcpcache "github.com/envoyproxy/go-control-plane/pkg/cache/types"
	cachev3 "github.com/envoyproxy/go-control-plane/pkg/cache/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	gcpserver "github.com/envoyproxy/go-control-plane/pkg/server/v3"
	"github.com/osm-vm/osm-vm/bench/pki"
	"github.com/osm-vm/osm-vm/bench/wire"
	"github.com/osm-vm/osm-vm/bench/workload"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
)

// Options are the flags serve-l and serve-f share.
type Options struct {
	dir      string // ca.crt, server.crt, server.key
	workload workload.Workload
	extra    int    // proxies beyond the fleet that may join (M5)
	mode     string // serve-l: snapshot or mux
}

func ParseFlags(name string, args []string, stderr io.Writer) (Options, error) {
	var o Options
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.StringVar(&o.dir, "dir", "", "directory with ca.crt, server.crt and server.key")
	fs.IntVar(&o.workload.Services, "services", 1000, "services in the workload")
	fs.IntVar(&o.workload.Endpoints, "endpoints", 10, "endpoints per service")
	fs.IntVar(&o.workload.Proxies, "proxies", 10000, "proxies in the fleet")
	fs.BoolVar(&o.workload.Wide, "wide", false, "every service calls every service (M9)")
	fs.IntVar(&o.extra, "extra", 0, "proxies that may join beyond the fleet")
	fs.StringVar(&o.mode, "mode", "snapshot", "serve-l: snapshot (SnapshotCache) or mux (MuxCache, LinearCache EDS)")
	if err := fs.Parse(args); err != nil {
		return o, err
	}
	if o.dir == "" {
		return o, errors.New(name + ": --dir is required (the harness writes the server's certificates there)")
	}
	if o.workload.Services < 2 || o.workload.Endpoints < 1 || o.workload.Proxies < 0 {
		return o, fmt.Errorf("%s: need --services >= 2, --endpoints >= 1, --proxies >= 0", name)
	}
	return o, nil
}

// changer applies "endpoint 0 of service u moves to ChangedAddr(seq)".
type changer interface {
	Change(u, seq int) error
}

// Serve runs an xDS server (L or F) until ctx ends. It prints one line,
// "ready <xds address> <control address>", once both listen.
func Serve(ctx context.Context, log *slog.Logger, kind string, o Options, stdout io.Writer) error {
	tlsConf, err := pki.ServerTLS(o.dir)
	if err != nil {
		return err
	}
	var (
		grpcSrv *grpc.Server
		ch      changer
	)
	creds := grpc.Creds(credentials.NewTLS(tlsConf))
	switch kind {
	case "serve-f":
		f, err := newFloor(o.workload, o.extra)
		if err != nil {
			return err
		}
		grpcSrv = grpc.NewServer(creds, grpc.ForceServerCodecV2(wire.Codec{}))
		grpcSrv.RegisterService(&grpc.ServiceDesc{
			ServiceName: "envoy.service.discovery.v3.AggregatedDiscoveryService",
			HandlerType: (*any)(nil),
			Streams: []grpc.StreamDesc{{
				StreamName: "StreamAggregatedResources", ServerStreams: true, ClientStreams: true,
				Handler: func(_ any, ss grpc.ServerStream) error { return f.stream(ss) },
			}},
		}, nil)
		ch = f
	case "serve-l":
		l, err := newLServer(ctx, o.workload, o.extra, o.mode)
		if err != nil {
			return err
		}
		grpcSrv = grpc.NewServer(creds)
		discovery.RegisterAggregatedDiscoveryServiceServer(grpcSrv, gcpserver.NewServer(ctx, l.cache, nil))
		ch = l
	default:
		return fmt.Errorf("unknown server %q", kind)
	}
	xdsLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return fmt.Errorf("xDS listener: %w", err)
	}
	ctlLis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		xdsLis.Close()
		return fmt.Errorf("control listener: %w", err)
	}
	// WriteTimeout bounds an answer, and is above the longest CPU profile
	// the harness asks for (15 s of the fill; pprof refuses longer ones).
	ctl := &http.Server{Handler: controlHandler(ch), ReadHeaderTimeout: 5 * time.Second, WriteTimeout: time.Minute}
	fmt.Fprintf(stdout, "ready %s %s\n", xdsLis.Addr(), ctlLis.Addr())
	log.Info("serving", "kind", kind, "mode", o.mode, "xds", xdsLis.Addr().String(), "control", ctlLis.Addr().String())

	var wg sync.WaitGroup
	errc := make(chan error, 2)
	wg.Add(2)
	go func() { defer wg.Done(); errc <- grpcSrv.Serve(xdsLis) }()
	go func() { defer wg.Done(); errc <- ctl.Serve(ctlLis) }()
	select {
	case <-ctx.Done():
		err = nil
	case err = <-errc:
	}
	grpcSrv.Stop()
	ctl.Close()
	wg.Wait()
	return err
}

// controlHandler serves POST /change?service=U&seq=N; it answers once the
// change has been handed to the cache or the floor's streams. It also
// serves GET /debug/pprof/profile and heap, for
// --profile-dir's profiles of every server's fill and storm (the listener
// is on loopback, as O's debug listener is).
func controlHandler(ch changer) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /debug/pprof/profile", pprof.Profile)
	mux.Handle("GET /debug/pprof/heap", pprof.Handler("heap")) // ?gc=1 collects first
	mux.HandleFunc("POST /change", func(w http.ResponseWriter, r *http.Request) {
		u, err1 := strconv.Atoi(r.URL.Query().Get("service"))
		seq, err2 := strconv.Atoi(r.URL.Query().Get("seq"))
		if err := errors.Join(err1, err2); err != nil {
			http.Error(w, "change: want ?service=<index>&seq=<n>: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := ch.Change(u, seq); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	})
	return mux
}

// ---- F: the floor ----

// floor marshals each resource once and writes the same response bytes to
// every stream of a view; it does nothing else (no per-stream state beyond
// the version last sent, no NACK handling).
type floor struct {
	w       workload.Workload
	callers [][]int
	mu      sync.Mutex // serialises changes
	claAny  [][]byte   // per service: its CLA as a marshalled Any
	views   []*fview   // per service
	gen     int
}

type fview struct {
	mu      sync.Mutex
	resp    [3][]byte
	ver     [3]string
	streams map[*fstream]struct{}
}

type fstream struct {
	kick chan struct{}
	mu   sync.Mutex
	want [3]bool
	sent [3]string
}

func marshalAny(m proto.Message) ([]byte, error) {
	a, err := anypb.New(m)
	if err != nil {
		return nil, err
	}
	return proto.Marshal(a)
}

func newFloor(w workload.Workload, extra int) (*floor, error) {
	f := &floor{w: w, callers: make([][]int, w.Services), claAny: make([][]byte, w.Services), views: make([]*fview, w.Services)}
	clusterAny := make([][]byte, w.Services)
	for i := range w.Services {
		var err error
		if f.claAny[i], err = marshalAny(w.CLA(i, netip.Addr{})); err != nil {
			return nil, err
		}
		if clusterAny[i], err = marshalAny(w.Cluster(i)); err != nil {
			return nil, err
		}
	}
	for s := range w.ServedServices(extra) {
		up := w.Upstreams(s)
		cds, lds := make([][]byte, len(up)), make([][]byte, len(up))
		for k, u := range up {
			f.callers[u] = append(f.callers[u], s)
			cds[k] = clusterAny[u]
			l, err := w.Listener(s, u)
			if err != nil {
				return nil, err
			}
			if lds[k], err = marshalAny(l); err != nil {
				return nil, err
			}
		}
		v := &fview{streams: map[*fstream]struct{}{}, ver: [3]string{"c1", "e1", "l1"}}
		v.resp[0] = wire.AppendResponse(nil, v.ver[0], resource.ClusterType, cds)
		v.resp[1] = wire.AppendResponse(nil, v.ver[1], resource.EndpointType, f.edsAnys(s))
		v.resp[2] = wire.AppendResponse(nil, v.ver[2], resource.ListenerType, lds)
		f.views[s] = v
	}
	return f, nil
}

func (f *floor) edsAnys(s int) [][]byte {
	up := f.w.Upstreams(s)
	out := make([][]byte, len(up))
	for k, u := range up {
		out[k] = f.claAny[u]
	}
	return out
}

func (f *floor) Change(u, seq int) error {
	if u < 0 || u >= f.w.Services {
		return fmt.Errorf("change: service %d out of range", u)
	}
	a, err := marshalAny(f.w.CLA(u, workload.ChangedAddr(seq)))
	if err != nil {
		return err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	f.gen++
	f.claAny[u] = a
	ver := fmt.Sprintf("e%d", f.gen+1)
	for _, s := range f.callers[u] {
		v := f.views[s]
		resp := wire.AppendResponse(nil, ver, resource.EndpointType, f.edsAnys(s))
		v.mu.Lock()
		v.resp[1], v.ver[1] = resp, ver
		streams := make([]*fstream, 0, len(v.streams))
		for st := range v.streams {
			streams = append(streams, st)
		}
		v.mu.Unlock()
		for _, st := range streams {
			select {
			case st.kick <- struct{}{}:
			default:
			}
		}
	}
	return nil
}

func peerCN(ctx context.Context) (string, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return "", errors.New("no peer")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.VerifiedChains) == 0 {
		return "", errors.New("no verified client certificate")
	}
	return ti.State.VerifiedChains[0][0].Subject.CommonName, nil
}

func (f *floor) stream(ss grpc.ServerStream) error {
	cn, err := peerCN(ss.Context())
	if err != nil {
		return err
	}
	var req discovery.DiscoveryRequest
	if err := ss.RecvMsg(&req); err != nil {
		return err
	}
	if req.GetNode().GetId() != cn {
		return fmt.Errorf("node id %q is not the certificate's CN %q", req.GetNode().GetId(), cn)
	}
	parts := strings.Split(cn, ".")
	s := -1
	if len(parts) == 3 {
		_, _ = fmt.Sscanf(parts[1], "svc-%d", &s)
	}
	if s < 0 || s >= f.w.Services {
		return fmt.Errorf("node %q: no such service", cn)
	}
	v := f.views[s]
	if v == nil {
		return fmt.Errorf("node %q: service %d has no proxies in this workload", cn, s)
	}
	st := &fstream{kick: make(chan struct{}, 1)}
	v.mu.Lock()
	v.streams[st] = struct{}{}
	v.mu.Unlock()
	defer func() {
		v.mu.Lock()
		delete(v.streams, st)
		v.mu.Unlock()
	}()
	ctx, cancel := context.WithCancel(ss.Context())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		f.send(ctx, ss, v, st)
	}()
	defer wg.Wait()
	defer cancel()
	for {
		if i := wire.TypeIndex(req.GetTypeUrl()); i >= 0 {
			st.mu.Lock()
			st.want[i] = true
			st.mu.Unlock()
			select {
			case st.kick <- struct{}{}:
			default:
			}
		}
		req.Reset()
		if err := ss.RecvMsg(&req); err != nil {
			return nil
		}
	}
}

func (f *floor) send(ctx context.Context, ss grpc.ServerStream, v *fview, st *fstream) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-st.kick:
		}
		for i := range wire.TypeOrder {
			v.mu.Lock()
			resp, ver := v.resp[i], v.ver[i]
			v.mu.Unlock()
			st.mu.Lock()
			need := st.want[i] && st.sent[i] != ver
			if need {
				st.sent[i] = ver
			}
			st.mu.Unlock()
			if need {
				if err := ss.SendMsg(resp); err != nil {
					return
				}
			}
		}
	}
}

// ---- L: go-control-plane's caches ----

// lServer feeds go-control-plane pre-built snapshots: SnapshotCache for
// everything (mode snapshot), or a MuxCache with a LinearCache for EDS
// (mode mux).
type lServer struct {
	ctx      context.Context
	w        workload.Workload
	mode     string
	snap     cachev3.SnapshotCache
	linear   *cachev3.LinearCache
	cache    cachev3.Cache
	callers  [][]int
	nodesOf  [][]string
	clusters [][]gcpcache.Resource
	lds      [][]gcpcache.Resource
	mu       sync.Mutex
	clas     []*endpointv3.ClusterLoadAssignment
	gen      int
}

func newLServer(ctx context.Context, w workload.Workload, extra int, mode string) (*lServer, error) {
	l := &lServer{
		ctx: ctx, w: w, mode: mode,
		snap:     cachev3.NewSnapshotCache(true, cachev3.IDHash{}, nil),
		callers:  make([][]int, w.Services),
		nodesOf:  make([][]string, w.Services),
		clusters: make([][]gcpcache.Resource, w.Services),
		lds:      make([][]gcpcache.Resource, w.Services),
		clas:     make([]*endpointv3.ClusterLoadAssignment, w.Services),
	}
	for i := range w.Services {
		l.clas[i] = w.CLA(i, netip.Addr{})
	}
	for s := range w.ServedServices(extra) {
		for _, u := range w.Upstreams(s) {
			l.callers[u] = append(l.callers[u], s)
			l.clusters[s] = append(l.clusters[s], w.Cluster(u))
			lis, err := w.Listener(s, u)
			if err != nil {
				return nil, err
			}
			l.lds[s] = append(l.lds[s], lis)
		}
	}
	for p := range w.Proxies + extra {
		s := w.ProxyService(p)
		l.nodesOf[s] = append(l.nodesOf[s], w.ProxyCN(p))
	}
	switch mode {
	case "snapshot":
		l.cache = l.snap
	case "mux":
		all := make(map[string]gcpcache.Resource, w.Services)
		for i, c := range l.clas {
			all[w.ClusterName(i)] = c
		}
		l.linear = cachev3.NewLinearCache(resource.EndpointType, cachev3.WithInitialResources(all))
		l.cache = &cachev3.MuxCache{
			Classify: func(r *cachev3.Request) string {
				if r.GetTypeUrl() == resource.EndpointType {
					return "eds"
				}
				return "snap"
			},
			ClassifyDelta: func(r *cachev3.DeltaRequest) string {
				if r.GetTypeUrl() == resource.EndpointType {
					return "eds"
				}
				return "snap"
			},
			Caches: map[string]cachev3.Cache{"eds": l.linear, "snap": l.snap},
		}
	default:
		return nil, fmt.Errorf("serve-l: --mode %q: want snapshot or mux", mode)
	}
	for s := range w.ServedServices(extra) {
		if err := l.publish(s); err != nil {
			return nil, err
		}
	}
	return l, nil
}

// publish builds service s's snapshot and sets it on every node of s.
func (l *lServer) publish(s int) error {
	res := map[resource.Type][]gcpcache.Resource{
		resource.ClusterType:  l.clusters[s],
		resource.ListenerType: l.lds[s],
	}
	if l.mode == "snapshot" {
		up := l.w.Upstreams(s)
		eds := make([]gcpcache.Resource, len(up))
		for k, u := range up {
			eds[k] = l.clas[u]
		}
		res[resource.EndpointType] = eds
	}
	snap, err := cachev3.NewSnapshot(fmt.Sprintf("v%d", l.gen), res)
	if err != nil {
		return fmt.Errorf("snapshot of %s: %w", l.w.ServiceName(s), err)
	}
	for _, n := range l.nodesOf[s] {
		if err := l.snap.SetSnapshot(l.ctx, n, snap); err != nil {
			return fmt.Errorf("set snapshot of %s: %w", n, err)
		}
	}
	return nil
}

func (l *lServer) Change(u, seq int) error {
	if u < 0 || u >= l.w.Services {
		return fmt.Errorf("change: service %d out of range", u)
	}
	cla := l.w.CLA(u, workload.ChangedAddr(seq))
	l.mu.Lock()
	defer l.mu.Unlock()
	l.gen++
	l.clas[u] = cla
	if l.mode == "mux" {
		return l.linear.UpdateResource(l.w.ClusterName(u), cla)
	}
	for _, s := range l.callers[u] {
		if err := l.publish(s); err != nil {
			return err
		}
	}
	return nil
}
