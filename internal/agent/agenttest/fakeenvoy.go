package agenttest

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"strconv"
	"sync/atomic"
	"syscall"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	statuspb "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/protobuf/encoding/protojson"

	"github.com/osm-vm/osm-vm/internal/agent/envoy"

	// The extensions osm-server's listeners and clusters use, so the
	// stand-in can unpack and check them as Envoy (which links them) does.
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/rbac/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
)

// Environment variables that make a test binary act as Envoy (the helper
// process pattern) and tell the stand-in when to crash.
const (
	// FakeEnvoyEnv set to "1" makes RunFakeEnvoyIfAsked act as Envoy.
	FakeEnvoyEnv = "OSM_AGENTTEST_FAKE_ENVOY"
	// FakeEnvoyCrashEnv: "start" exits 2 after parsing the bootstrap,
	// "ack" exits 3 after the first listener ACK.
	FakeEnvoyCrashEnv = "OSM_AGENTTEST_FAKE_ENVOY_CRASH"
)

// RunFakeEnvoyIfAsked turns the current process into the Envoy stand-in
// when FakeEnvoyEnv is "1", and exits with its status; otherwise it
// returns. Call it first thing in TestMain, then run the driver with the
// test binary (os.Args[0]) as the Envoy path.
func RunFakeEnvoyIfAsked() {
	if os.Getenv(FakeEnvoyEnv) != "1" {
		return
	}
	os.Exit(FakeEnvoyMain(os.Args[1:]))
}

// FakeEnvoyMain is the Envoy stand-in. It accepts exactly the flags the
// Envoy driver passes, strictly parses the bootstrap (protojson, unknown
// fields rejected, ValidateAll on every message and every Any), serves
// POST /drain_listeners on the admin address, reads the SDS files the xDS
// cluster names, connects to the ADS address over mTLS with the files they
// name, requests listeners, binds each listener's address as Envoy on
// Linux does (SO_REUSEPORT unless the listener turns enable_reuse_port
// off; accepted connections are closed, nothing is proxied), ACKs them, or
// NACKs them naming the address that could not be bound, and runs until
// SIGTERM. It logs in Envoy's format on stderr.
func FakeEnvoyMain(args []string) int {
	logf := func(level, format string, a ...any) {
		fmt.Fprintf(os.Stderr, "[%s][%d][%s][fake] %s\n", time.Now().Format("2006-01-02 15:04:05.000"), os.Getpid(), level, fmt.Sprintf(format, a...))
	}
	fs := flag.NewFlagSet("envoy", flag.ContinueOnError)
	config := fs.String("c", "", "bootstrap path")
	drainTime := fs.Int("drain-time-s", 600, "")
	fs.String("drain-strategy", "gradual", "")
	fs.Bool("disable-hot-restart", false, "")
	fs.String("log-level", "info", "")
	if err := fs.Parse(args); err != nil {
		return 1
	}
	if fs.NArg() != 0 || *config == "" {
		logf("critical", "want -c <bootstrap> and no arguments, got %q", args)
		return 1
	}
	b, err := readBootstrap(*config)
	if err != nil {
		logf("critical", "error initializing configuration '%s': %v", *config, err)
		return 1
	}
	logf("info", "loaded bootstrap for node %s (drain time %ds)", b.GetNode().GetId(), *drainTime)
	if os.Getenv(FakeEnvoyCrashEnv) == "start" {
		logf("critical", "crashing at start as asked")
		return 2
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGTERM, os.Interrupt)
	defer stop()
	admin := b.GetAdmin().GetAddress().GetSocketAddress()
	lis, err := net.Listen("tcp", net.JoinHostPort(admin.GetAddress(), strconv.Itoa(int(admin.GetPortValue()))))
	if err != nil {
		logf("critical", "admin listener: %v", err)
		return 1
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /drain_listeners", func(w http.ResponseWriter, r *http.Request) {
		_, graceful := r.URL.Query()["graceful"]
		logf("info", "draining listeners (graceful=%t)", graceful)
		fmt.Fprintln(w, "OK")
	})
	mux.HandleFunc("GET /ready", func(w http.ResponseWriter, r *http.Request) { fmt.Fprintln(w, "LIVE") })
	// Envoy's stat of its ADS stream, as /stats prints it: 1 once the
	// first listeners were ACKed.
	var connected atomic.Int32
	mux.HandleFunc("GET /stats", func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, "control_plane.connected_state: %d\n", connected.Load())
	})
	// The clusters, with their hosts' health flags, as Envoy's admin
	// lists them (FakeEnvoyClustersEnv adds the ones a test wants).
	mux.HandleFunc("GET /clusters", serveClusters(b))
	srv := &http.Server{Handler: mux}
	go srv.Serve(lis)
	defer srv.Close()

	version, err := adsOnce(ctx, b, logf)
	if err != nil {
		logf("error", "ads: %v", err)
	} else {
		logf("info", "lds: ACKed version %s", version)
		connected.Store(1)
		if os.Getenv(FakeEnvoyCrashEnv) == "ack" {
			logf("critical", "crashing after ACK as asked")
			return 3
		}
	}
	<-ctx.Done()
	logf("info", "caught SIGTERM; exiting")
	return 0
}

func readBootstrap(path string) (*bootstrapv3.Bootstrap, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var b bootstrapv3.Bootstrap
	if err := protojson.Unmarshal(data, &b); err != nil {
		return nil, err
	}
	if err := envoy.ValidateBootstrap(&b); err != nil {
		return nil, err
	}
	return &b, nil
}

// readSecret reads an SDS path config source file and returns the secret
// named name. It insists on a watched directory: without one Envoy would
// not see a renewed certificate.
func readSecret(cs *corev3.ConfigSource, name string) (*tlsv3.Secret, error) {
	pcs := cs.GetPathConfigSource()
	if pcs == nil {
		return nil, fmt.Errorf("secret %s: not a path config source", name)
	}
	if pcs.GetWatchedDirectory().GetPath() == "" {
		return nil, fmt.Errorf("secret %s: path config source has no watched directory", name)
	}
	data, err := os.ReadFile(pcs.GetPath())
	if err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	var dr discoveryv3.DiscoveryResponse
	if err := protojson.Unmarshal(data, &dr); err != nil {
		return nil, fmt.Errorf("secret %s: %s: %w", name, pcs.GetPath(), err)
	}
	if err := envoy.Validate(&dr); err != nil {
		return nil, fmt.Errorf("secret %s: %w", name, err)
	}
	for _, a := range dr.GetResources() {
		var s tlsv3.Secret
		if err := a.UnmarshalTo(&s); err != nil {
			return nil, fmt.Errorf("secret %s: %w", name, err)
		}
		if s.GetName() == name {
			return &s, nil
		}
	}
	return nil, fmt.Errorf("secret %s: not in %s", name, pcs.GetPath())
}

// adsOnce dials the bootstrap's xDS cluster with the SDS-named certificate,
// requests listeners, binds them and ACKs the first response, or NACKs it
// when a listener cannot be bound. It returns the version ACKed. The
// listeners stay bound until ctx is done.
func adsOnce(ctx context.Context, b *bootstrapv3.Bootstrap, logf func(level, format string, a ...any)) (string, error) {
	clusterName := b.GetDynamicResources().GetAdsConfig().GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	var addr string
	var utc tlsv3.UpstreamTlsContext
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() != clusterName {
			continue
		}
		sa := c.GetLoadAssignment().GetEndpoints()[0].GetLbEndpoints()[0].GetEndpoint().GetAddress().GetSocketAddress()
		addr = net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
		if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&utc); err != nil {
			return "", fmt.Errorf("cluster %s transport socket: %w", clusterName, err)
		}
	}
	common := utc.GetCommonTlsContext()
	if len(common.GetTlsCertificateSdsSecretConfigs()) != 1 {
		return "", errors.New("want one TLS certificate SDS secret config")
	}
	certCfg := common.GetTlsCertificateSdsSecretConfigs()[0]
	certSecret, err := readSecret(certCfg.GetSdsConfig(), certCfg.GetName())
	if err != nil {
		return "", err
	}
	caCfg := common.GetValidationContextSdsSecretConfig()
	caSecret, err := readSecret(caCfg.GetSdsConfig(), caCfg.GetName())
	if err != nil {
		return "", err
	}
	tc := certSecret.GetTlsCertificate()
	pair, err := tls.LoadX509KeyPair(tc.GetCertificateChain().GetFilename(), tc.GetPrivateKey().GetFilename())
	if err != nil {
		return "", err
	}
	caPEM, err := os.ReadFile(caSecret.GetValidationContext().GetTrustedCa().GetFilename())
	if err != nil {
		return "", err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return "", errors.New("trusted CA file holds no certificate")
	}
	// Envoy sends SNI only when the context names it, and checks the
	// server's certificate only as its validation context says (see
	// verifyUpstream): no host name, no key usage.
	conn, err := grpc.NewClient(addr, grpc.WithTransportCredentials(credentials.NewTLS(&tls.Config{
		Certificates:       []tls.Certificate{pair},
		ServerName:         utc.GetSni(),
		InsecureSkipVerify: true, //nolint:gosec // verified below, as Envoy verifies
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyUpstream(cs.PeerCertificates, pool, caSecret.GetValidationContext())
		},
		MinVersion: tls.VersionTLS12,
	})))
	if err != nil {
		return "", err
	}
	go func() { <-ctx.Done(); conn.Close() }()
	stream, err := discoveryv3.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		return "", err
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{Node: b.GetNode(), TypeUrl: ListenerType}); err != nil {
		return "", err
	}
	resp, err := stream.Recv()
	if err != nil {
		return "", err
	}
	var bindErrs []error
	for _, r := range resp.GetResources() {
		m, err := r.UnmarshalNew()
		if err != nil {
			return "", err
		}
		if err := envoy.Validate(m); err != nil {
			return "", err
		}
		if l, ok := m.(*listenerv3.Listener); ok {
			if err := bindListener(ctx, l, logf); err != nil {
				bindErrs = append(bindErrs, err)
			}
		}
	}
	if err := errors.Join(bindErrs...); err != nil {
		logf("warning", "lds: rejecting version %s: %v", resp.GetVersionInfo(), err)
		nack := &discoveryv3.DiscoveryRequest{
			TypeUrl: ListenerType, ResponseNonce: resp.GetNonce(),
			ErrorDetail: &statuspb.Status{Code: int32(codes.InvalidArgument), Message: err.Error()},
		}
		if serr := stream.Send(nack); serr != nil {
			return "", serr
		}
		return "", fmt.Errorf("lds: NACKed version %s: %w", resp.GetVersionInfo(), err)
	}
	if err := stream.Send(&discoveryv3.DiscoveryRequest{
		TypeUrl: ListenerType, VersionInfo: resp.GetVersionInfo(), ResponseNonce: resp.GetNonce(),
	}); err != nil {
		return "", err
	}
	return resp.GetVersionInfo(), nil
}

// bindListener binds l's socket address, as Envoy does when it adds a
// listener, and closes every connection it accepts until ctx is done. A
// listener without one (an API listener) binds nothing.
func bindListener(ctx context.Context, l *listenerv3.Listener, logf func(level, format string, a ...any)) error {
	sa := l.GetAddress().GetSocketAddress()
	if sa == nil {
		return nil
	}
	addr := net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))
	reuse := l.GetEnableReusePort() == nil || l.GetEnableReusePort().GetValue() // Envoy's default on Linux
	lc := net.ListenConfig{}
	if reuse {
		lc.Control = reusePort
	}
	lis, err := lc.Listen(ctx, "tcp", addr)
	if err != nil {
		return fmt.Errorf("error adding listener '%s': cannot bind '%s': %w", l.GetName(), addr, err)
	}
	logf("info", "lds: listener '%s' bound to %s (reuse_port %t)", l.GetName(), addr, reuse)
	go func() { <-ctx.Done(); lis.Close() }()
	go func() {
		for {
			c, err := lis.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return nil
}
