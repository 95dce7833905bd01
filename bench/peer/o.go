package peer

import (
	"cmp"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/bench/fleet"
	"github.com/osm-vm/osm-vm/bench/process"
	"github.com/osm-vm/osm-vm/bench/workload"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/testaddr"
)

// OTarget runs the real osm-server: the workload's endpoints go into the
// static provider's file, its services and policies through the spec API,
// and every proxy enrolls through the enrollment API with a join token (one
// per service, uses = its proxies), as osm-agent does.
type OTarget struct {
	OSMServer    string
	Pin          *process.Pinning
	StaticPlugin string
	Dir          string
	LogW         io.Writer
	Log          *slog.Logger
	LogLevel     string // osm-server's --log-level
	runs         int
}

func (t *OTarget) Name() string { return "O" }

// FreePort returns a loopback address nobody listens on right now, below
// the kernel's ephemeral range and not returned before (testaddr.Pick):
// port 0's pick, from the ephemeral range, was taken as the source port
// of one of the harness's own connections (the fleet's, Consul's) before
// the server bound it, which ended a round with "address already in use".
func FreePort() (string, error) { return testaddr.Pick() }

// writeEndpoints writes the static provider's file for w, where moved[u]
// = seq puts endpoint 0 of service u at ChangedAddr(seq). The write is
// atomic (rename).
func writeEndpoints(path string, w workload.Workload, moved map[int]int) error {
	if err := prepareEndpoints(path, w, moved); err != nil {
		return err
	}
	return os.Rename(path+".tmp", path)
}

// prepareEndpoints writes what writeEndpoints would to path+".tmp" in the
// same directory, for a rename over path to make the change.
func prepareEndpoints(path string, w workload.Workload, moved map[int]int) error {
	var b strings.Builder
	b.WriteString("services:\n")
	for i := range w.Services {
		fmt.Fprintf(&b, "- name: %s\n  namespace: %s\n  endpoints:\n", w.ServiceName(i), workload.Namespace)
		for j := range w.Endpoints {
			a := w.EndpointAddr(i, j)
			if seq, ok := moved[i]; ok && j == 0 {
				a = workload.ChangedAddr(seq)
			}
			fmt.Fprintf(&b, "  - {ip: %s, port: %d}\n", a, workload.EndpointPort)
		}
	}
	if err := os.WriteFile(path+".tmp", []byte(b.String()), 0o644); err != nil {
		return fmt.Errorf("endpoints file: %w", err)
	}
	return nil
}

// specDocs are the Service, TCPRoute and TrafficTarget documents of w, in
// batches the spec API accepts.
func specDocs(w workload.Workload, extra int) []string {
	var docs []string
	docs = append(docs, `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec:
  traffic: {permissive: false}
  endpoints: {requireConnectedProxy: false}
`)
	docs = append(docs, fmt.Sprintf(`apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: any, namespace: %s}
spec:
  matches: {ports: []}
`, workload.Namespace))
	callers := make([][]int, w.Services)
	for s := range w.ServedServices(extra) {
		for _, u := range w.Upstreams(s) {
			callers[u] = append(callers[u], s)
		}
	}
	for i := range w.Services {
		docs = append(docs, fmt.Sprintf(`apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: %s, namespace: %s}
spec:
  ports: [{port: %d, appProtocol: tcp}]
`, w.ServiceName(i), workload.Namespace, workload.EndpointPort))
	}
	for u := range w.Services {
		if len(callers[u]) == 0 {
			continue
		}
		var src strings.Builder
		for _, s := range callers[u] {
			fmt.Fprintf(&src, "  - {kind: ServiceAccount, name: %s, namespace: %s}\n", w.ServiceName(s), workload.Namespace)
		}
		docs = append(docs, fmt.Sprintf(`apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: %s, namespace: %s}
spec:
  destination: {kind: ServiceAccount, name: %s, namespace: %s}
  sources:
%s  rules: [{kind: TCPRoute, name: any}]
`, w.ServiceName(u), workload.Namespace, w.ServiceName(u), workload.Namespace, src.String()))
	}
	var batches []string
	const perBatch = 200
	for len(docs) > 0 {
		n := min(perBatch, len(docs))
		batches = append(batches, "---\n"+strings.Join(docs[:n], "---\n"))
		docs = docs[n:]
	}
	return batches
}

func (t *OTarget) Start(ctx context.Context, w workload.Workload, extra int) (_ *Server, err error) {
	for _, p := range []string{t.OSMServer, t.StaticPlugin} {
		if _, err := os.Stat(p); err != nil {
			return nil, fmt.Errorf("O: %w (build it with make build)", err)
		}
	}
	t.runs++
	dir := filepath.Join(t.Dir, fmt.Sprint(t.runs))
	dataDir := filepath.Join(dir, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	endpointsFile := filepath.Join(dir, "endpoints.yaml")
	if err := writeEndpoints(endpointsFile, w, nil); err != nil {
		return nil, err
	}
	var addrs [3]string
	for i := range addrs {
		if addrs[i], err = FreePort(); err != nil {
			return nil, err
		}
	}
	cfg := fmt.Sprintf(`dataDir: %s
pluginDir: %s
debugAddress: %s
apiAddress: %s
xdsAddress: %s
providers:
  - name: bench
    plugin: osm-provider-static
    config: {file: %s}
`, dataDir, filepath.Dir(t.StaticPlugin), addrs[0], addrs[1], addrs[2], endpointsFile)
	cfgFile := filepath.Join(dir, "osm-server.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	path, args := t.Pin.Wrap(t.OSMServer, []string{"serve", "--config", cfgFile, "--log-level", cmp.Or(t.LogLevel, "warn")})
	proc, _, err := process.StartChild(ctx, path, args, nil, t.LogW, "")
	if err != nil {
		return nil, fmt.Errorf("O: %w", err)
	}
	defer func() {
		if err != nil {
			proc.Stop()
		}
	}()

	// The API is up once the admin token and CA exist and the port accepts.
	var adminToken, caPEM []byte
	deadline := time.Now().Add(60 * time.Second)
	for {
		adminToken, _ = os.ReadFile(filepath.Join(dataDir, "admin.token"))
		caPEM, _ = os.ReadFile(filepath.Join(dataDir, "ca.crt"))
		c, derr := net.DialTimeout("tcp", addrs[1], time.Second)
		if derr == nil {
			c.Close()
		}
		if len(adminToken) > 0 && len(caPEM) > 0 && derr == nil {
			break
		}
		if !proc.Alive() || time.Now().After(deadline) {
			return nil, fmt.Errorf("O: osm-server did not serve its API on %s with admin.token and ca.crt in %s: %w (alive=%t)", addrs[1], dataDir, process.ErrNotAvailable, proc.Alive())
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return nil, errors.New("O: ca.crt holds no PEM certificate")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	api := &APIClient{
		Base:  "https://" + addrs[1],
		Token: strings.TrimSpace(string(adminToken)),
		HC:    &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: roots, MinVersion: tls.VersionTLS12}}},
	}
	for i, batch := range specDocs(w, extra) {
		if err := api.Do(ctx, http.MethodPost, "/api/v1/spec/apply?source=osm-bench", "application/yaml", []byte(batch), nil); err != nil {
			return nil, fmt.Errorf("O: apply the workload's spec (batch %d): %w", i, err)
		}
	}
	t.Log.Info("enrolling proxies through the API (not a metric)", "n", w.Proxies+extra)
	ids, xdsAddr, err := EnrollAll(ctx, []*APIClient{api}, w, extra, meshapi.CAHash(block.Bytes))
	if err != nil {
		return nil, err
	}
	if xdsAddr == "" {
		xdsAddr = addrs[2]
	}
	// xDS opens once the static provider has listed the workload.
	if err := waitDial(ctx, xdsAddr, proc); err != nil {
		return nil, fmt.Errorf("O: %w", err)
	}
	host, _, _ := net.SplitHostPort(xdsAddr)
	moved := map[int]int{} // service -> seq of the change that moved its endpoint 0
	return &Server{
		Proc:      proc,
		Endpoint:  fleet.Endpoint{Addr: xdsAddr, ServerName: host, Roots: roots},
		IDs:       ids,
		DebugAddr: addrs[0],
		PprofAddr: addrs[0],
		// The debug listener's /debug/ routes take the admin token.
		DebugToken: strings.TrimSpace(string(adminToken)),
		// The change is the rename, as an operator's tooling makes it; the
		// new file is written beside the old one before the clock starts.
		// Earlier changes stay in it, as they stay in L's and F's state
		// (rewriting service 0's original addresses made M3's first change
		// an all-proxy change too).
		Prepare: func(u, seq int) error {
			moved[u] = seq
			return prepareEndpoints(endpointsFile, w, moved)
		},
		Change: func(ctx context.Context, u, seq int) error {
			return os.Rename(endpointsFile+".tmp", endpointsFile)
		},
		Apply: func(ctx context.Context, doc string) error {
			return api.Do(ctx, http.MethodPost, "/api/v1/spec/apply?source=osm-bench", "application/yaml", []byte(doc), nil)
		},
		Close: proc.Stop,
		Restart: func(ctx context.Context) (*process.Child, string, error) {
			proc.Stop()
			var err error
			if proc, _, err = process.StartChild(ctx, path, args, nil, t.LogW, ""); err != nil {
				return nil, "", fmt.Errorf("O: %w", err)
			}
			if err := waitDial(ctx, xdsAddr, proc); err != nil {
				proc.Stop()
				return nil, "", fmt.Errorf("O after a restart: %w", err)
			}
			return proc, xdsAddr, nil
		},
	}, nil
}

// waitDial waits until osm-server (proc) accepts connections on its xDS
// address, which it opens once its providers have listed the workload.
func waitDial(ctx context.Context, xdsAddr string, proc *process.Child) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		c, err := net.DialTimeout("tcp", xdsAddr, 2*time.Second)
		if err == nil {
			c.Close()
			return nil
		}
		if !proc.Alive() || time.Now().After(deadline) {
			return fmt.Errorf("osm-server does not serve xDS on %s: %w (alive=%t)", xdsAddr, process.ErrNotAvailable, proc.Alive())
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// EnrollAll enrolls w.Proxies+extra proxies, proxy p into service
// ProxyService(p) through apis[p % len(apis)] (the tokens are created
// through apis[0]), and returns their identities and the xDS address the
// first server announced.
func EnrollAll(ctx context.Context, apis []*APIClient, w workload.Workload, extra int, caHash string) ([]fleet.Identity, string, error) {
	api := apis[0]
	n := w.Proxies + extra
	perService := map[int]int{}
	for p := range n {
		perService[w.ProxyService(p)]++
	}
	secrets := map[int]string{}
	for s, uses := range perService {
		body, _ := json.Marshal(meshapi.CreateTokenRequest{
			Service: mesh.MeshService{Name: w.ServiceName(s), Namespace: workload.Namespace}, Uses: uses, TTL: "2h",
		})
		var created meshapi.CreatedToken
		if err := api.Do(ctx, http.MethodPost, "/api/v1/tokens", "application/json", body, &created); err != nil {
			return nil, "", fmt.Errorf("O: join token for %s: %w", w.ServiceName(s), err)
		}
		secrets[s] = created.Secret
	}
	ids := make([]fleet.Identity, n)
	errs := make([]error, n)
	var xdsAddr string
	var once sync.Once
	var wg sync.WaitGroup
	const workers = 8
	for k := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := k; p < n; p += workers {
				if ctx.Err() != nil {
					errs[p] = ctx.Err()
					return
				}
				key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
				if err != nil {
					errs[p] = err
					continue
				}
				s := w.ProxyService(p)
				res, err := meshclient.Enroll(ctx, nil, meshclient.JoinRequest{
					Server: apis[p%len(apis)].Base, Token: secrets[s], CACertHash: caHash,
					Service: mesh.MeshService{Name: w.ServiceName(s), Namespace: workload.Namespace},
				}, key)
				if err != nil {
					errs[p] = fmt.Errorf("O: enroll proxy %d: %w", p, err)
					continue
				}
				cert, err := tls.X509KeyPair(res.CertificatePEM, mustKeyPEM(key))
				if err != nil {
					errs[p] = fmt.Errorf("O: proxy %d certificate: %w", p, err)
					continue
				}
				// The same shape as the other servers' identities
				// (fleet.MintIdentities): X509KeyPair also keeps the parsed
				// certificate, which the fleet never reads (connect), and
				// which made its heap 39 MB larger, and its collector
				// busier, while it measured O and only O.
				cert.Leaf = nil
				ids[p] = fleet.Identity{CN: res.Identity, Cert: cert, Address: w.ProxyAddr(p).String()}
				once.Do(func() { xdsAddr = res.XDSAddress })
			}
		}()
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return nil, "", err
	}
	return ids, xdsAddr, nil
}

func mustKeyPEM(key *ecdsa.PrivateKey) []byte {
	der, err := x509.MarshalECPrivateKey(key)
	if err != nil {
		panic(err) // a freshly generated P-256 key always marshals
	}
	return pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: der})
}

// APIClient calls osm-server's HTTPS API with the admin token.
type APIClient struct {
	Base  string
	Token string
	HC    *http.Client
}

func (a *APIClient) Do(ctx context.Context, method, path, contentType string, body []byte, out any) error {
	req, err := http.NewRequestWithContext(ctx, method, a.Base+path, strings.NewReader(string(body)))
	if err != nil {
		return err
	}
	req.Header.Set("Authorization", "Bearer "+a.Token)
	req.Header.Set("Content-Type", contentType)
	resp, err := a.HC.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s %s: %s: %s", method, path, resp.Status, strings.TrimSpace(string(b)))
	}
	if out != nil {
		return json.Unmarshal(b, out)
	}
	return nil
}
