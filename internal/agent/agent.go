// Package agent is osm-agent's library: its configuration, the run loop
// (enroll once with the join token, keep the proxy certificate renewed,
// render the proxy and gRPC xDS bootstraps, poll the server for hosts and
// the service certificate, supervise the proxy through a sidecar driver)
// and the system service install.
//
// Subpackages: sidecar (driver abstraction and supervisor), envoy (the
// reference driver), hostsfile, atomicfile, agenttest (fakes for tests).
// The agent talks to the server only over its HTTPS and xDS APIs: of
// osm-vm it imports internal/meshclient (the HTTPS client), internal/meshapi
// (the documents), internal/mesh and internal/atomicfile, and none of the
// server's packages: no internal/enroll, internal/store, go.etcd.io/bbolt,
// internal/certificate or internal/spec (deps_test.go enforces this).
//
// The agent's identity in its data directory (proxy.key, proxy.crt,
// ca.crt) is [SaveIdentity] and [LoadIdentity]; [CertRequest] obtains it
// (key, request, save) for enrollment, renewal and `osm-agent enroll`.
package agent

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io/fs"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"

	"github.com/osm-vm/osm-vm/internal/agent/envoy"
	"github.com/osm-vm/osm-vm/internal/agent/localxds"
	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
	"github.com/osm-vm/osm-vm/internal/atomicfile"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// Names of the agent's files in the data directory, beside the identity
// files (KeyFile, CertFile, CAFile) and the driver's files.
const (
	JoinTokenFile     = "join-token"
	StateFile         = "state.json"
	StatusFile        = "status.json"
	GRPCBootstrapFile = "grpc-bootstrap.json"
	ServiceCertFile   = "service.crt"
	ServiceKeyFile    = "service.key"
	ServiceCAFile     = "service-ca.crt"
	// LocalXDSSocket is the local xDS endpoint's Unix socket, which the
	// gRPC bootstrap names.
	LocalXDSSocket = "xds.sock"
)

// Enroller is the enrollment client the agent needs. NetworkEnroller is the
// real one; tests use a fake that signs with a test CA.
type Enroller interface {
	Enroll(ctx context.Context, req meshclient.JoinRequest, key crypto.Signer) (meshclient.Result, error)
	Renew(ctx context.Context, server string, caPEM []byte, cert tls.Certificate, key crypto.Signer) (meshclient.Result, error)
}

// NetworkEnroller enrolls and renews against osm-server over HTTPS with
// internal/meshclient.
type NetworkEnroller struct {
	// HTTPClient is used for enrollment; nil means a default client.
	HTTPClient *http.Client
}

// Enroll implements Enroller.
func (e NetworkEnroller) Enroll(ctx context.Context, req meshclient.JoinRequest, key crypto.Signer) (meshclient.Result, error) {
	return meshclient.Enroll(ctx, e.HTTPClient, req, key)
}

// Renew implements Enroller.
func (NetworkEnroller) Renew(ctx context.Context, server string, caPEM []byte, cert tls.Certificate, key crypto.Signer) (meshclient.Result, error) {
	return meshclient.Renew(ctx, server, caPEM, cert, key)
}

// Options tune an Agent; zero fields take defaults.
type Options struct {
	// Version is the agent version reported in the node metadata.
	Version string
	// RetryInitial and RetryMax bound the backoff of enrollment, renewal
	// and config polls while the server is unreachable (1s, 1m).
	RetryInitial, RetryMax time.Duration
	// Supervisor tunes the proxy supervisor; its DrainTime defaults to the
	// config's drainTimeout.
	Supervisor sidecar.SupervisorOptions
	// Metrics, when set, is the registry the agent registers its metrics
	// with and serves on the config's metricsAddress (metrics.go).
	Metrics *prometheus.Registry
	// EjectionCheck is how often the agent reads which backends its Envoy
	// has ejected, to report them (DefaultEjectionCheck when not
	// positive).
	EjectionCheck time.Duration
}

// Agent runs one machine's part of the mesh. Build it with New.
type Agent struct {
	cfg      Config
	log      *slog.Logger
	enroller Enroller
	driver   sidecar.Driver
	opts     Options
	sup      *sidecar.Supervisor
	hc       *http.Client

	mu         sync.Mutex
	id         Identity
	leaf       *x509.Certificate
	xdsAddress string
	// replicas are the mesh's osm-server replicas the server listed last
	// (kept in state.json); lastAPI is the API server that answered last.
	replicas []meshapi.Replica
	lastAPI  string
	// advertise is the detected advertise address (when the config sets
	// none) and the xDS address it was detected for.
	advertise, advertiseFor string
	st                      Status
	ready                   chan struct{} // closed once the proxy has a bootstrap
	readyOnce               sync.Once
	// localXDS is the local xDS endpoint of proxyless gRPC apps, set by
	// Run before its loops start.
	localXDS *localxds.Proxy
	// gateway is, on a gateway machine, the Gateway's listeners as the
	// server last sent them (kept in state.json).
	gateway *meshapi.GatewayConfig
	// gatewayChanged tells the certificate watcher the Gateway changed.
	gatewayChanged chan struct{}
	metrics        *agentMetrics // nil unless serving metrics
	lxStats        localXDSStats // the local xDS endpoint's streams (metrics.go)
}

// New returns an agent for cfg (with defaults applied and validated by the
// caller) running the proxy through driver.
func New(cfg Config, log *slog.Logger, e Enroller, driver sidecar.Driver, opts Options) *Agent {
	if opts.RetryInitial <= 0 {
		opts.RetryInitial = time.Second
	}
	if opts.RetryMax <= 0 {
		opts.RetryMax = time.Minute
	}
	if opts.EjectionCheck <= 0 {
		opts.EjectionCheck = DefaultEjectionCheck
	}
	if opts.Supervisor.DrainTime == 0 {
		opts.Supervisor.DrainTime = cfg.DrainTimeout
	}
	a := &Agent{cfg: cfg, log: log, enroller: e, driver: driver, opts: opts, ready: make(chan struct{}), gatewayChanged: make(chan struct{}, 1)}
	onEvent := opts.Supervisor.OnEvent
	opts.Supervisor.OnEvent = func(ev sidecar.Event) {
		a.writeStatus()
		if onEvent != nil {
			onEvent(ev)
		}
	}
	a.sup = sidecar.NewSupervisor(driver, log, opts.Supervisor)
	return a
}

func (a *Agent) path(name string) string { return filepath.Join(a.cfg.DataDir, name) }

// SaveJoinToken stores the join token in dataDir (0600) for the first
// enrollment by `osm-agent run`, which deletes it once enrolled.
func SaveJoinToken(dataDir, token string) error {
	if strings.TrimSpace(token) == "" {
		return errors.New("join token is empty: pass --token from `osm-server token create`")
	}
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return fmt.Errorf("save join token: %w", err)
	}
	return writeAtomic(filepath.Join(dataDir, JoinTokenFile), []byte(strings.TrimSpace(token)+"\n"), 0o600)
}

func writeAtomic(path string, data []byte, mode os.FileMode) error {
	return atomicfile.WriteFile(path, data, mode)
}

// Run runs the agent until ctx is done: it makes sure there is a valid
// proxy certificate (enrolling with the stored join token if not), renders
// the proxy's bootstrap, and then runs the config poller, the certificate
// renewer and the proxy supervisor together. With the server unreachable
// it keeps retrying and runs the proxy on its last bootstrap. It returns
// an error when the proxy binary cannot be run or the machine cannot be
// enrolled without an operator.
func (a *Agent) Run(ctx context.Context) error {
	if err := a.driver.Check(); err != nil {
		return err
	}
	if err := os.MkdirAll(a.cfg.DataDir, 0o700); err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	if err := a.ensureIdentity(ctx); err != nil {
		return err
	}
	if st, err := a.readState(); err == nil {
		a.setServers(st.XDSAddress, st.Replicas)
		a.mu.Lock()
		a.gateway = st.Gateway
		a.mu.Unlock()
	}
	// A gateway machine's certificate files are checked at start (with
	// the Gateway last learned), and at every config poll.
	a.checkGatewayCertificates()
	switch {
	case a.xds() != "":
		if err := a.writeProxyFiles(); err != nil {
			return err
		}
	case fileExists(a.path(a.driver.BootstrapFile())):
		a.log.Warn("xDS address not known yet; the proxy runs on its last bootstrap until the server answers")
		a.markReady()
	default:
		a.log.Warn("xDS address not known yet; the proxy starts once the server answers")
	}
	a.writeStatus()

	lx, err := localxds.Listen(a.log.With("part", "local-xds"), localxds.Options{
		TCPAddress:   a.cfg.LocalXDSAddress,
		SocketPath:   a.path(LocalXDSSocket),
		Upstreams:    a.upstreams(),
		Credentials:  a.upstreamCredentials,
		VerifyServer: meshclient.VerifyControlPlane,
		Metadata:     func() map[string]any { return GRPCNodeMetadata(a.ProxyConfig()) },
		Observer:     &a.lxStats,
		MaxStreams:   a.cfg.LocalXDSMaxStreams,
	})
	if err != nil {
		return err
	}
	a.localXDS = lx

	g, ctx := errgroup.WithContext(ctx)
	g.Go(func() error { return lx.Serve(ctx) })
	g.Go(func() error { a.pollLoop(ctx); return nil })
	g.Go(func() error { a.renewLoop(ctx); return nil })
	g.Go(func() error { a.serveMetrics(ctx); return nil })
	if a.cfg.Gateway != "" {
		g.Go(func() error { a.watchGatewayCertificates(ctx); return nil })
	}
	if a.cfg.Proxy == envoy.Name { // proxyless gRPC clients report no ejections
		g.Go(func() error { a.reportEjections(ctx); return nil })
	}
	g.Go(func() error {
		select {
		case <-ctx.Done():
			return nil
		case <-a.ready:
		}
		return a.sup.Run(ctx)
	})
	err = g.Wait()
	a.writeStatus()
	return err
}

// ensureIdentity loads the proxy identity, enrolling with the join token
// when it is missing, corrupt or expired.
func (a *Agent) ensureIdentity(ctx context.Context) error {
	id, leaf, err := loadCurrentIdentity(a.cfg.DataDir)
	if err == nil {
		a.setIdentity(id, leaf)
		return nil
	}
	token, terr := os.ReadFile(a.path(JoinTokenFile))
	if terr != nil {
		return fmt.Errorf("no usable proxy certificate and no join token in %s to enroll again: %w", a.cfg.DataDir, err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		a.log.Info("enrolling with the join token", "servers", a.apiServers())
	} else {
		a.log.Warn("proxy identity unusable; enrolling again with the join token", "err", err)
	}
	backoff := a.opts.RetryInitial
	for {
		err := a.enrollOnce(ctx, strings.TrimSpace(string(token)))
		if err == nil {
			break
		}
		if permanent(err) {
			return fmt.Errorf("enrollment refused: %w; get a new token with `osm-server token create --service %s --namespace %s` on the server, then run the `osm-agent enroll ...` command it prints", err, a.cfg.Service, a.cfg.Namespace)
		}
		a.log.Error("enrollment failed; retrying", "err", err, "backoff", backoff)
		if !sleep(ctx, backoff) {
			return ctx.Err()
		}
		backoff = min(2*backoff, a.opts.RetryMax)
	}
	id, leaf, err = loadCurrentIdentity(a.cfg.DataDir)
	if err != nil {
		return fmt.Errorf("after enrollment: %w", err)
	}
	a.setIdentity(id, leaf)
	if err := os.Remove(a.path(JoinTokenFile)); err != nil {
		a.log.Warn("could not delete the used join token", "err", err)
	}
	a.log.Info("enrolled", "identity", leaf.Subject.CommonName, "expires", leaf.NotAfter)
	return nil
}

func (a *Agent) enrollOnce(ctx context.Context, token string) error {
	req := &CertRequest{Dir: a.cfg.DataDir}
	res, _, err := req.Obtain(ctx, nil, func(ctx context.Context, key crypto.Signer) (meshclient.Result, error) {
		return failover(ctx, a, func(ctx context.Context, server string) (meshclient.Result, error) {
			return a.enroller.Enroll(ctx, meshclient.JoinRequest{
				Server: server, Token: token, CACertHash: a.cfg.CACertHash, Service: a.cfg.MeshService(),
			}, key)
		})
	})
	if err != nil {
		return err
	}
	a.setServers(res.XDSAddress, res.Replicas)
	return a.writeState()
}

// failover calls call with each API server in turn (apiServers) until one
// answers, and remembers the one that did.
func failover[T any](ctx context.Context, a *Agent, call func(ctx context.Context, server string) (T, error)) (T, error) {
	v, server, err := meshclient.Failover(ctx, a.apiServers(), call)
	if server != "" {
		a.mu.Lock()
		a.lastAPI = server
		a.st.APIServer = server
		a.mu.Unlock()
	}
	return v, err
}

// apiServers returns the osm-server API URLs to try, in order: the one
// that answered last, the configured ones, then every replica the server
// listed.
func (a *Agent) apiServers() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	out := []string{}
	add := func(s string) {
		if s != "" && !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	add(a.lastAPI)
	for _, s := range a.cfg.APIServers() {
		add(s)
	}
	for _, r := range a.replicas {
		add(r.API)
	}
	return out
}

// permanent reports whether an enrollment error will not go away by
// retrying: the server refused the request, or it is not the pinned server.
func permanent(err error) bool {
	var apiErr *meshclient.APIError
	if errors.As(err, &apiErr) {
		return apiErr.Status >= 400 && apiErr.Status < 500 && apiErr.Status != http.StatusTooManyRequests
	}
	return errors.Is(err, meshclient.ErrCAHashMismatch)
}

// loadIdentity is LoadIdentity plus an expiry check.
func loadCurrentIdentity(dir string) (Identity, *x509.Certificate, error) {
	id, err := LoadIdentity(dir)
	if err != nil {
		return Identity{}, nil, err
	}
	c, err := id.TLS()
	if err != nil {
		return Identity{}, nil, err
	}
	leaf := c.Leaf
	if leaf == nil {
		if leaf, err = x509.ParseCertificate(c.Certificate[0]); err != nil {
			return Identity{}, nil, err
		}
	}
	if _, err := mesh.ParseProxyIdentity(leaf.Subject.CommonName); err != nil {
		return Identity{}, nil, fmt.Errorf("%s: %w", filepath.Join(dir, CertFile), err)
	}
	if now := time.Now(); now.After(leaf.NotAfter) {
		return Identity{}, nil, fmt.Errorf("proxy certificate %s expired at %s", filepath.Join(dir, CertFile), leaf.NotAfter.Format(time.RFC3339))
	}
	return id, leaf, nil
}

func (a *Agent) setIdentity(id Identity, leaf *x509.Certificate) {
	a.mu.Lock()
	defer a.mu.Unlock()
	a.id, a.leaf = id, leaf
	a.st.Identity = leaf.Subject.CommonName
	a.st.CertificateExpires = leaf.NotAfter
}

func (a *Agent) identity() (Identity, *x509.Certificate) {
	a.mu.Lock()
	defer a.mu.Unlock()
	return a.id, a.leaf
}

// setServers records what the server said of where to reach it: the xDS
// address it gave and the replicas it listed (nil: keep those known, so
// a server that lists none does not make the agent forget them). It
// reports whether the xDS addresses changed.
func (a *Agent) setServers(xdsAddress string, replicas []meshapi.Replica) (changed bool) {
	before := a.xdsAddresses()
	a.mu.Lock()
	if xdsAddress != "" {
		a.xdsAddress = xdsAddress
	}
	if len(replicas) > 0 {
		a.replicas = slices.Clone(replicas)
	}
	a.mu.Unlock()
	after := a.xdsAddresses()
	a.updateStatus(func(s *Status) {
		s.XDSAddress, s.XDSServers = "", after
		if len(after) > 0 {
			s.XDSAddress = after[0]
		}
	})
	return !slices.Equal(before, after)
}

// xdsAddresses returns the xDS servers of the proxy and of the local xDS
// endpoint: every replica's, rotated by this machine's identity so that
// agents spread over the replicas, then the address the server gave when
// it is not among them (a load balancer's, or one this machine reaches
// where a replica's advertised name does not resolve), so the list always
// holds an address that worked.
func (a *Agent) xdsAddresses() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	var out []string
	for _, r := range a.replicas {
		if r.XDS != "" && !slices.Contains(out, r.XDS) {
			out = append(out, r.XDS)
		}
	}
	if len(out) > 1 && a.leaf != nil {
		h := fnv.New32a()
		h.Write([]byte(a.leaf.Subject.CommonName))
		k := int(h.Sum32() % uint32(len(out)))
		out = append(out[k:], out[:k]...)
	}
	if a.xdsAddress != "" && !slices.Contains(out, a.xdsAddress) {
		out = append(out, a.xdsAddress)
	}
	return out
}

// upstreams returns the xDS servers the local xDS endpoint carries the
// apps' streams to (it tries the one that last worked first).
func (a *Agent) upstreams() []string { return a.xdsAddresses() }

// upstreamCredentials returns the current proxy certificate and mesh CA,
// read by the local xDS endpoint for each new upstream stream (so a
// renewed certificate is used from the next stream on).
func (a *Agent) upstreamCredentials() (tls.Certificate, *x509.CertPool, error) {
	id, _ := a.identity()
	cert, err := id.TLS()
	if err != nil {
		return tls.Certificate{}, nil, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(id.CAPEM) {
		return tls.Certificate{}, nil, fmt.Errorf("%s holds no PEM certificate", a.path(CAFile))
	}
	return cert, pool, nil
}

// xds returns the first xDS address ("" while none is known).
func (a *Agent) xds() string {
	if addrs := a.xdsAddresses(); len(addrs) > 0 {
		return addrs[0]
	}
	return ""
}

// advertiseAddress returns the configured advertise address or, when the
// config sets none, the local address this machine reaches the xDS server
// from: the one other machines most likely reach it on. The server refuses
// a proxy without one, and does not guess it from the connection (behind
// NAT that guess is wrong); an operator whose machine is reached on another
// address sets advertiseAddress.
func (a *Agent) advertiseAddress() string {
	if a.cfg.AdvertiseAddress != "" {
		return a.cfg.AdvertiseAddress
	}
	xds := a.xds()
	a.mu.Lock()
	if a.advertiseFor == xds && a.advertise != "" {
		defer a.mu.Unlock()
		return a.advertise
	}
	a.mu.Unlock()
	addr, err := localAddressTowards(xds)
	if err != nil {
		a.log.Warn("no advertiseAddress configured and none detected: the server will refuse the proxy until advertiseAddress is set in the agent config", "xdsAddress", xds, "err", err)
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.advertise != addr {
		a.log.Info("advertise address detected from the route to the xDS server (set advertiseAddress in the agent config to choose another)", "advertiseAddress", addr, "xdsAddress", xds)
	}
	a.advertise, a.advertiseFor = addr, xds
	return addr
}

// localAddressTowards returns the local IP address the kernel picks to
// reach hostport. A UDP "connection" sends nothing; it only routes.
func localAddressTowards(hostport string) (string, error) {
	if hostport == "" {
		return "", errors.New("the xDS server address is not known yet")
	}
	c, err := net.Dial("udp", hostport)
	if err != nil {
		return "", err
	}
	defer c.Close()
	ap, err := netip.ParseAddrPort(c.LocalAddr().String())
	if err != nil {
		return "", err
	}
	addr := ap.Addr().Unmap()
	if addr.IsUnspecified() {
		return "", fmt.Errorf("the route to %s has no local address", hostport)
	}
	return addr.String(), nil
}

func (a *Agent) markReady() { a.readyOnce.Do(func() { close(a.ready) }) }

// state is what the agent remembers between runs beside the identity.
type state struct {
	XDSAddress string `json:"xdsAddress"`
	// Replicas are the osm-server replicas the server listed last, so a
	// restarted agent fails over along them before it reaches a server.
	Replicas []meshapi.Replica `json:"replicas,omitempty"`
	// Gateway is a gateway machine's Gateway as the server sent it last,
	// so its certificate files are checked at start.
	Gateway *meshapi.GatewayConfig `json:"gateway,omitempty"`
}

func (a *Agent) readState() (state, error) {
	var s state
	data, err := os.ReadFile(a.path(StateFile))
	if err != nil {
		return s, err
	}
	return s, json.Unmarshal(data, &s)
}

func (a *Agent) writeState() error {
	a.mu.Lock()
	st := state{XDSAddress: a.xdsAddress, Replicas: a.replicas, Gateway: a.gateway}
	a.mu.Unlock()
	data, err := json.MarshalIndent(st, "", "  ")
	if err != nil {
		return err
	}
	return writeAtomic(a.path(StateFile), append(data, '\n'), 0o600)
}

// ProxyConfig returns what the driver renders the bootstrap from.
func (a *Agent) ProxyConfig() sidecar.ProxyConfig {
	_, leaf := a.identity()
	cn := ""
	if leaf != nil {
		cn = leaf.Subject.CommonName
	}
	labels := map[string]string{}
	for k, v := range a.cfg.Labels {
		labels[k] = v
	}
	var controlPlane string
	if leaf != nil {
		controlPlane = controlPlaneID(leaf)
	}
	return sidecar.ProxyConfig{
		ControlPlaneID:   controlPlane,
		NodeID:           cn,
		Service:          a.cfg.MeshService(),
		XDSAddress:       a.xds(),
		XDSAddresses:     a.xdsAddresses(),
		CertFile:         a.path(CertFile),
		KeyFile:          a.path(KeyFile),
		CAFile:           a.path(CAFile),
		AgentVersion:     a.opts.Version,
		AdvertiseAddress: a.advertiseAddress(),
		AppPort:          a.cfg.AppPort,
		Labels:           labels,
		Gateway:          a.cfg.Gateway != "",
		GatewayCertDir:   a.cfg.GatewayCertDir,
	}
}

// controlPlaneID is the identity the control plane's certificates carry
// in the trust domain of leaf, the machine's proxy certificate ("" when it
// has no SPIFFE ID; the proxy configuration then refuses to render).
func controlPlaneID(leaf *x509.Certificate) string {
	for _, u := range leaf.URIs {
		if td, err := mesh.TrustDomain(u.String()); err == nil {
			return mesh.ControlPlaneSPIFFEID(td)
		}
	}
	return ""
}

// writeProxyFiles renders and writes the driver's files and the gRPC xDS
// bootstrap, each only when its content changed, and marks the proxy ready.
func (a *Agent) writeProxyFiles() error {
	files, err := a.renderFiles()
	if err != nil {
		return err
	}
	for _, f := range files {
		path := a.path(f.Name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			return err
		}
		if old, err := os.ReadFile(path); err == nil && string(old) == string(f.Data) {
			continue
		}
		if err := writeAtomic(path, f.Data, f.Mode); err != nil {
			return err
		}
		a.log.Info("wrote proxy configuration", "file", path)
	}
	a.markReady()
	return nil
}

// renderFiles returns the driver's files followed by the gRPC xDS
// bootstrap, which the agent writes whatever the driver.
func (a *Agent) renderFiles() ([]sidecar.File, error) {
	p := a.ProxyConfig()
	files, err := a.driver.Files(p)
	if err != nil {
		return nil, fmt.Errorf("render %s bootstrap: %w", a.driver.Name(), err)
	}
	grpcBoot, err := GRPCBootstrap(p, a.cfg.DataDir, "unix:"+a.path(LocalXDSSocket))
	if err != nil {
		return nil, fmt.Errorf("render gRPC xDS bootstrap: %w", err)
	}
	return append(files, sidecar.File{Name: GRPCBootstrapFile, Data: grpcBoot, Mode: 0o644}), nil
}

func fileExists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}

// sleep waits d or until ctx is done; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// Drivers returns the sidecar drivers the agent knows: Envoy, and "none"
// (ProxyNone) for machines whose applications are proxyless gRPC.
func Drivers() *sidecar.Registry {
	var r sidecar.Registry
	for name, f := range map[string]sidecar.Factory{envoy.Name: envoy.Factory, ProxyNone: noProxyFactory} {
		if err := r.Register(name, f); err != nil {
			panic(err) // a fresh registry cannot hold the names yet
		}
	}
	return &r
}

// NewDriver builds the sidecar driver cfg names.
func NewDriver(cfg Config) (sidecar.Driver, error) {
	return Drivers().New(cfg.Proxy, sidecar.Options{
		BinaryPath: cfg.EnvoyPath, DataDir: cfg.DataDir, AdminPort: cfg.AdminPort, DrainTime: cfg.DrainTimeout,
	})
}

// RenderBootstrap returns the bootstrap the proxy would start from (the
// gRPC xDS bootstrap for the "none" driver), for the identity in the data
// directory and the xDS address the agent last learned (or xdsAddress when
// not empty). It writes nothing.
func (a *Agent) RenderBootstrap(xdsAddress string) ([]byte, error) {
	id, leaf, err := loadCurrentIdentity(a.cfg.DataDir)
	if err != nil {
		return nil, err
	}
	a.setIdentity(id, leaf)
	if xdsAddress == "" {
		st, err := a.readState()
		if err != nil || (st.XDSAddress == "" && len(st.Replicas) == 0) {
			return nil, fmt.Errorf("the xDS address is not known yet (%s has none): start the agent once, or pass --xds-address", a.path(StateFile))
		}
		a.setServers(st.XDSAddress, st.Replicas)
	}
	a.setServers(xdsAddress, nil)
	files, err := a.renderFiles()
	if err != nil {
		return nil, err
	}
	for _, f := range files {
		if f.Name == a.driver.BootstrapFile() {
			return f.Data, nil
		}
	}
	return nil, fmt.Errorf("%s driver rendered no %s", a.driver.Name(), a.driver.BootstrapFile())
}
