// Package ha is the benchmark's several-servers section: three
// osm-server replicas (peer's O, as processes) on a three-server Consul
// cluster, the fleet spread over them. It measures what the store costs
// at rest (Consul's Raft commits, the replicas' memory beside one alone),
// how long an apply takes to reach the proxies of the other replicas, and
// a failover: one replica killed, its proxies reconnecting to the others.
// It returns a metrics.Result with the HA.* figures. Of osm-vm it imports
// only internal/meshapi (the wire types of the spec API).
package ha

import (
	"bufio"
	"cmp"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/bench/fleet"
	"github.com/osm-vm/osm-vm/bench/metrics"
	"github.com/osm-vm/osm-vm/bench/peer"
	"github.com/osm-vm/osm-vm/bench/process"
	"github.com/osm-vm/osm-vm/bench/report"
	"github.com/osm-vm/osm-vm/bench/workload"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// Plan sizes the HA section: three osm-server replicas on a three-server
// Consul cluster, the proxies spread over them.
type Plan struct {
	Consul       string // the consul binary; the section is skipped without it
	OSMServer    string
	StaticPlugin string
	Dir          string
	LogW         io.Writer
	LogLevel     string
	Proxies      int
	Services     int
	Reps         int
	Rest         time.Duration // the at-rest window
	Settle       time.Duration // wait for a change to reach every proxy
}

// haReplicas is how many osm-servers the section runs.
const haReplicas = 3

// consulServer is one Consul server of the cluster the section starts.
type consulServer struct {
	http string // host:8500
	proc *process.Child
}

// replica is one osm-server of the section.
type replica struct {
	api            *peer.APIClient
	xds, debug     string
	proc           *process.Child
	dataDir        string
	proxies        []int // indexes into the identities
	fleet          *fleet.Fleet
	pcs            []*fleet.ProxyClient
	baseRSS, rssKB float64
}

// Measure runs the section: apply on one replica -> last proxy ACKed on
// the others (p50, p99), kill -9 of a replica -> its proxies configured
// again on the others, Consul's Raft writes at rest, per change, per
// enrollment and in the failover's reconnects, and each replica's RSS per
// proxy.
func Measure(ctx context.Context, log *slog.Logger, p Plan) (*metrics.Result, error) {
	res := &metrics.Result{Values: map[string]float64{}}
	if p.Consul == "" {
		return nil, fmt.Errorf("no consul binary (--consul; make bench builds it with hack/build-consul.sh): %w", process.ErrNotAvailable)
	}
	for _, f := range []string{p.Consul, p.OSMServer, p.StaticPlugin} {
		if _, err := os.Stat(f); err != nil {
			return nil, fmt.Errorf("%w: %w", err, process.ErrNotAvailable)
		}
	}
	if err := os.MkdirAll(p.Dir, 0o700); err != nil {
		return nil, err
	}
	w := workload.Workload{Services: p.Services, Endpoints: 2, Proxies: p.Proxies}
	endpointsFile := filepath.Join(p.Dir, "endpoints.yaml")
	if err := os.WriteFile(endpointsFile, []byte(haEndpoints(w, p.Reps)), 0o644); err != nil {
		return nil, err
	}
	// The single-server figure beside the replicas': the same services,
	// and as many proxies as each replica holds, on one osm-server with
	// its bbolt file.
	one := w
	one.Proxies = w.Proxies / haReplicas
	single, err := singleRSSPerProxy(ctx, p, one, endpointsFile)
	if err != nil {
		return nil, fmt.Errorf("HA: the single server: %w", err)
	}
	res.Set("HA.rss_per_proxy_single", single)
	log.Info("HA: single-server RSS per proxy measured", "kib", single)

	consul, err := startConsulCluster(ctx, p.Consul, p.Dir, p.LogW)
	if err != nil {
		return nil, err
	}
	defer func() {
		for _, c := range consul {
			c.proc.Stop()
		}
	}()
	log.Info("HA: consul cluster up", "servers", len(consul))

	rs := make([]*replica, haReplicas)
	for i := range rs {
		if rs[i], err = startReplica(ctx, p, i, consul[i%len(consul)].http, endpointsFile); err != nil {
			return nil, err
		}
		defer func() { rs[i].proc.Stop() }()
	}
	for _, r := range rs {
		if err := waitReady(ctx, r); err != nil {
			return nil, err
		}
	}
	caHash, err := setUp(ctx, rs, w)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.baseRSS, err = process.MemKiB(r.proc.PID(), "VmRSS"); err != nil {
			return nil, err
		}
	}

	// Enrollment: one token per service (created through replica 1), each
	// proxy through replica p%3.
	apis := make([]*peer.APIClient, len(rs))
	for i, r := range rs {
		apis[i] = r.api
	}
	raft0, err := raftIndex(ctx, consul)
	if err != nil {
		return nil, err
	}
	commits0 := storeCommits(ctx, rs)
	start := time.Now()
	ids, _, err := peer.EnrollAll(ctx, apis, w, 0, caHash)
	if err != nil {
		return nil, fmt.Errorf("HA: enroll: %w", err)
	}
	// Claims are written when a proxy first connects: counted with the
	// Fleet's first connection below.
	for i := range ids {
		rs[i%len(rs)].proxies = append(rs[i%len(rs)].proxies, i)
	}
	var wg sync.WaitGroup
	errs := make([]error, len(rs))
	for i, r := range rs {
		wg.Go(func() {
			mine := make([]fleet.Identity, len(r.proxies))
			for k, p := range r.proxies {
				mine[k] = ids[p]
			}
			r.pcs, errs[i] = r.fleet.ConnectAll(ctx, mine, 64, 2*time.Minute)
		})
	}
	wg.Wait()
	defer func() {
		for _, r := range rs {
			fleet.CloseAll(r.pcs)
		}
	}()
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("HA: connect the fleet: %w", err)
	}
	log.Info("HA: fleet configured", "proxies", len(ids), "took", time.Since(start).Round(time.Millisecond))
	// Let the claims (written in the background) land before counting.
	time.Sleep(2 * time.Second)
	raft1, err1 := raftIndex(ctx, consul)
	commits1 := storeCommits(ctx, rs)
	if err1 == nil {
		res.Set("HA.raft_per_enrollment", float64(raft1-raft0)/float64(len(ids)))
	}
	res.Set("HA.commits_per_enrollment", (commits1-commits0)/float64(len(ids)))
	res.Set("HA.proxies", float64(len(ids)))

	// RSS per proxy on each replica.
	var rssSum float64
	for i, r := range rs {
		rss, err := process.MemKiB(r.proc.PID(), "VmRSS")
		if err != nil {
			return nil, err
		}
		per := (rss - r.baseRSS) / float64(len(r.pcs))
		res.Set(fmt.Sprintf("HA.rss_per_proxy_r%d", i+1), per)
		rssSum += per
	}
	res.Set("HA.rss_per_proxy", rssSum/float64(len(rs)))

	// At rest: every proxy connected, nothing changing.
	raft0, err0 := raftIndex(ctx, consul)
	commits0 = storeCommits(ctx, rs)
	time.Sleep(p.Rest) // a rate over a window
	raft1, err1 = raftIndex(ctx, consul)
	commits1 = storeCommits(ctx, rs)
	if err0 == nil && err1 == nil {
		res.Set("HA.raft_per_s_rest", float64(raft1-raft0)/p.Rest.Seconds())
	}
	res.Set("HA.commits_per_s_rest", (commits1-commits0)/p.Rest.Seconds())

	// Apply on replica 1 -> the last proxy on replicas 2 and 3 ACKed.
	var lasts []float64
	affected := len(rs[1].pcs) + len(rs[2].pcs)
	raft0, err0 = raftIndex(ctx, consul)
	commits0 = storeCommits(ctx, rs)
	for seq := range p.Reps {
		pr := &fleet.Probe{Seq: seq + 1, Marker: []byte(haProbeService(seq)), Acks: make(chan fleet.AckEvent, affected)}
		rs[1].fleet.Probe.Store(pr)
		rs[2].fleet.Probe.Store(pr)
		t0 := time.Now()
		doc := fmt.Sprintf("apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec: {ports: [{port: %d, appProtocol: tcp}]}\n",
			haProbeService(seq), workload.Namespace, workload.EndpointPort)
		if err := rs[0].api.Do(ctx, http.MethodPost, "/api/v1/spec/apply?source=osm-bench", "application/yaml", []byte(doc), nil); err != nil {
			return nil, fmt.Errorf("HA: apply %d: %w", seq, err)
		}
		got, last := 0, 0.0
		timeout := time.After(p.Settle)
	wait:
		for got < affected {
			select {
			case ev := <-pr.Acks:
				got++
				last = max(last, ms(ev.At.Sub(t0)))
			case <-timeout:
				res.Note("HA: apply %d: %d of %d proxies on the other replicas ACKed within %s", seq, got, affected, p.Settle)
				break wait
			case <-ctx.Done():
				return nil, ctx.Err()
			}
		}
		rs[1].fleet.Probe.Store(nil)
		rs[2].fleet.Probe.Store(nil)
		lasts = append(lasts, last)
		time.Sleep(200 * time.Millisecond) // pacing between changes, not synchronization
	}
	raft1, err1 = raftIndex(ctx, consul)
	commits1 = storeCommits(ctx, rs)
	res.Set("HA.apply_p50", report.Percentile(lasts, 50))
	res.Set("HA.apply_p99", report.Percentile(lasts, 99))
	if err0 == nil && err1 == nil {
		res.Set("HA.raft_per_change", float64(raft1-raft0)/float64(p.Reps))
	}
	res.Set("HA.commits_per_change", (commits1-commits0)/float64(p.Reps))
	log.Info("HA: applies measured", "reps", len(lasts), "p50_ms", report.Percentile(lasts, 50))

	// kill -9 of replica 3: its proxies reconnect to replicas 1 and 2, as
	// an agent that knows every replica does.
	victim := rs[2]
	orphans := victim.pcs
	raft0, err0 = raftIndex(ctx, consul)
	commits0 = storeCommits(ctx, rs[:2])
	t0 := time.Now()
	victim.proc.Kill()
	var again [2][]fleet.Identity
	for k, pc := range orphans {
		<-pc.Done() // the stream ends with the process
		again[k%2] = append(again[k%2], pc.ID)
	}
	fleet.CloseAll(orphans)
	victim.pcs = nil
	for i := range again {
		wg.Go(func() {
			var got []*fleet.ProxyClient
			got, errs[i] = rs[i].fleet.ConnectAll(ctx, again[i], len(again[i]), time.Minute)
			rs[i].pcs = append(rs[i].pcs, got...)
		})
	}
	wg.Wait()
	if err := errors.Join(errs[:2]...); err != nil {
		res.Note("HA: failover: %v", err)
	}
	res.Set("HA.failover_s", time.Since(t0).Seconds())
	res.Set("HA.failover_proxies", float64(len(orphans)))
	time.Sleep(time.Second) // claims of the moved proxies, if any
	raft1, err1 = raftIndex(ctx, consul)
	commits1 = storeCommits(ctx, rs[:2])
	if err0 == nil && err1 == nil {
		res.Set("HA.raft_failover", float64(raft1-raft0))
	}
	res.Set("HA.commits_failover", commits1-commits0)
	log.Info("HA: failover measured", "proxies", len(orphans), "took_s", res.Values["HA.failover_s"])
	return res, nil
}

// setUp trusts the replicas' CA, applies w's spec through the first and
// waits until every replica knows its services. It returns the CA's hash
// for enrollment.
func setUp(ctx context.Context, rs []*replica, w workload.Workload) (string, error) {
	caPEM, err := os.ReadFile(filepath.Join(rs[0].dataDir, "ca.crt"))
	if err != nil {
		return "", err
	}
	block, _ := pem.Decode(caPEM)
	if block == nil {
		return "", errors.New("HA: ca.crt holds no PEM certificate")
	}
	roots := x509.NewCertPool()
	roots.AppendCertsFromPEM(caPEM)
	for _, r := range rs {
		r.api.HC.Transport.(*http.Transport).TLSClientConfig.RootCAs = roots
		r.fleet = &fleet.Fleet{Endpoint: fleet.Endpoint{Addr: r.xds, ServerName: "127.0.0.1", Roots: roots}}
	}
	if err := rs[0].api.Do(ctx, http.MethodPost, "/api/v1/spec/apply?source=osm-bench", "application/yaml", []byte(haSpec(w)), nil); err != nil {
		return "", fmt.Errorf("HA: apply the workload: %w", err)
	}
	for _, r := range rs {
		if err := waitServices(ctx, r, w.Services); err != nil {
			return "", err
		}
	}
	return meshapi.CAHash(block.Bytes), nil
}

// singleRSSPerProxy runs w on one osm-server on its bbolt file and
// returns its RSS per connected proxy.
func singleRSSPerProxy(ctx context.Context, p Plan, w workload.Workload, endpointsFile string) (float64, error) {
	r, err := startReplica(ctx, p, -1, "", endpointsFile)
	if err != nil {
		return 0, err
	}
	defer r.proc.Stop()
	if err := waitReady(ctx, r); err != nil {
		return 0, err
	}
	caHash, err := setUp(ctx, []*replica{r}, w)
	if err != nil {
		return 0, err
	}
	base, err := process.MemKiB(r.proc.PID(), "VmRSS")
	if err != nil {
		return 0, err
	}
	ids, _, err := peer.EnrollAll(ctx, []*peer.APIClient{r.api}, w, 0, caHash)
	if err != nil {
		return 0, err
	}
	pcs, err := r.fleet.ConnectAll(ctx, ids, 64, 2*time.Minute)
	defer fleet.CloseAll(pcs)
	if err != nil {
		return 0, err
	}
	time.Sleep(2 * time.Second) // as for the replicas: claims land
	rss, err := process.MemKiB(r.proc.PID(), "VmRSS")
	if err != nil {
		return 0, err
	}
	return (rss - base) / float64(len(pcs)), nil
}

// haProbeService names the Service the seq'th measured apply adds: its
// name in a proxy's CDS response marks the response carrying it.
func haProbeService(seq int) string { return fmt.Sprintf("hap-%05d", seq) }

// haSpec is the section's mesh: permissive (every proxy has every service
// as an upstream, so an added Service reaches every proxy), and w's
// services.
func haSpec(w workload.Workload) string {
	var b strings.Builder
	b.WriteString("apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {traffic: {permissive: true}, endpoints: {requireConnectedProxy: false}}\n")
	for i := range w.Services {
		fmt.Fprintf(&b, "---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: %s, namespace: %s}\nspec: {ports: [{port: %d, appProtocol: tcp}]}\n",
			w.ServiceName(i), workload.Namespace, workload.EndpointPort)
	}
	return b.String()
}

// haEndpoints is the static provider's file: w's services, and one
// Endpoint for each probe Service the applies add.
func haEndpoints(w workload.Workload, reps int) string {
	var b strings.Builder
	b.WriteString("services:\n")
	for i := range w.Services {
		fmt.Fprintf(&b, "- name: %s\n  namespace: %s\n  endpoints:\n", w.ServiceName(i), workload.Namespace)
		for j := range w.Endpoints {
			fmt.Fprintf(&b, "  - {ip: %s, port: %d}\n", w.EndpointAddr(i, j), workload.EndpointPort)
		}
	}
	for seq := range reps {
		fmt.Fprintf(&b, "- name: %s\n  namespace: %s\n  endpoints:\n  - {ip: %s, port: %d}\n", haProbeService(seq), workload.Namespace, workload.ChangedAddr(seq+1), workload.EndpointPort)
	}
	return b.String()
}

// startConsulCluster starts three Consul servers, each on its own
// 127.x.y.z with Consul's default ports, and waits for a leader.
func startConsulCluster(ctx context.Context, bin, dir string, logw io.Writer) ([]consulServer, error) {
	x, y := 1+rand.IntN(250), 1+rand.IntN(250)
	ips := make([]string, haReplicas)
	for i := range ips {
		ips[i] = fmt.Sprintf("127.%d.%d.%d", x, y, i+1)
	}
	var out []consulServer
	for i, ip := range ips {
		args := []string{"agent", "-server", "-bootstrap-expect", strconv.Itoa(len(ips)),
			"-node", fmt.Sprintf("bench-%d", i+1), "-bind", ip, "-client", ip,
			"-dns-port", "-1", "-grpc-port", "-1", "-grpc-tls-port", "-1",
			"-data-dir", filepath.Join(dir, fmt.Sprintf("consul-%d", i+1)), "-log-level", "warn",
			"-hcl", "disable_update_check = true"}
		for j, peer := range ips {
			if j != i {
				args = append(args, "-retry-join", peer)
			}
		}
		c, _, err := process.StartChild(ctx, bin, args, nil, logw, "")
		if err != nil {
			for _, s := range out {
				s.proc.Stop()
			}
			return nil, fmt.Errorf("HA: consul: %w", err)
		}
		out = append(out, consulServer{http: net.JoinHostPort(ip, "8500"), proc: c})
	}
	deadline := time.Now().Add(90 * time.Second)
	for _, s := range out {
		for {
			var leader string
			err := getJSON(ctx, "http://"+s.http+"/v1/status/leader", &leader)
			if err == nil && leader != "" {
				break
			}
			if time.Now().After(deadline) {
				for _, s := range out {
					s.proc.Stop()
				}
				return nil, fmt.Errorf("HA: consul %s: no leader within 90s: %v", s.http, err)
			}
			if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
				return nil, err
			}
		}
	}
	return out, nil
}

// startReplica starts osm-server replica i on consulAddr; i -1 is a
// single server on its bbolt file.
func startReplica(ctx context.Context, p Plan, i int, consulAddr, endpointsFile string) (*replica, error) {
	dir := filepath.Join(p.Dir, fmt.Sprintf("replica-%d", i+1))
	store, env := []string{"--store", "consul"}, []string{"CONSUL_HTTP_ADDR=" + consulAddr}
	if i < 0 { // the single server on its bbolt file
		dir, store, env = filepath.Join(p.Dir, "single"), nil, nil
	}
	dataDir := filepath.Join(dir, "data")
	if err := os.MkdirAll(dataDir, 0o700); err != nil {
		return nil, err
	}
	var addrs [3]string
	for k := range addrs {
		var err error
		if addrs[k], err = peer.FreePort(); err != nil {
			return nil, err
		}
	}
	cfg := fmt.Sprintf("providers:\n  - {name: bench, plugin: osm-provider-static, config: {file: %s}}\n", endpointsFile)
	cfgFile := filepath.Join(dir, "osm-server.yaml")
	if err := os.WriteFile(cfgFile, []byte(cfg), 0o600); err != nil {
		return nil, err
	}
	args := append([]string{"serve", "--config", cfgFile, "--data-dir", dataDir, "--plugin-dir", filepath.Dir(p.StaticPlugin),
		"--debug-address", addrs[0], "--api-address", addrs[1], "--xds-address", addrs[2],
		"--log-level", cmp.Or(p.LogLevel, "warn")}, store...)
	proc, _, err := process.StartChild(ctx, p.OSMServer, args, env, p.LogW, "")
	if err != nil {
		return nil, fmt.Errorf("HA: replica %d: %w", i+1, err)
	}
	return &replica{
		api:     &peer.APIClient{Base: "https://" + addrs[1], HC: &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{TLSClientConfig: &tls.Config{MinVersion: tls.VersionTLS12}}}},
		xds:     addrs[2],
		debug:   addrs[0],
		proc:    proc,
		dataDir: dataDir,
	}, nil
}

// waitReady waits for r's /readyz, then reads its admin token.
func waitReady(ctx context.Context, r *replica) error {
	deadline := time.Now().Add(90 * time.Second)
	for {
		resp, err := http.Get("http://" + r.debug + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if !r.proc.Alive() || time.Now().After(deadline) {
			return fmt.Errorf("HA: replica at %s not ready (alive=%t): %w", r.debug, r.proc.Alive(), process.ErrNotAvailable)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
	tok, err := os.ReadFile(filepath.Join(r.dataDir, "admin.token"))
	if err != nil {
		return fmt.Errorf("HA: %w", err)
	}
	r.api.Token = strings.TrimSpace(string(tok))
	return nil
}

// waitServices waits until r lists at least n Services.
func waitServices(ctx context.Context, r *replica, n int) error {
	deadline := time.Now().Add(60 * time.Second)
	for {
		var list struct {
			Items []json.RawMessage `json:"items"`
		}
		err := r.api.Do(ctx, http.MethodGet, "/api/v1/spec/services", "application/json", nil, &list)
		if err == nil && len(list.Items) >= n {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("HA: replica %s lists %d of %d Services after 60s: %v", r.api.Base, len(list.Items), n, err)
		}
		if err := sleepCtx(ctx, 50*time.Millisecond); err != nil {
			return err
		}
	}
}

// raftIndex is the highest Raft log index the Consul servers report: it
// grows by one with every write Consul commits, its own included.
func raftIndex(ctx context.Context, servers []consulServer) (uint64, error) {
	var top uint64
	var last error
	for _, s := range servers {
		if !s.proc.Alive() {
			continue
		}
		var self struct {
			Stats struct {
				Raft map[string]string `json:"raft"`
			} `json:"Stats"`
		}
		if err := getJSON(ctx, "http://"+s.http+"/v1/agent/self", &self); err != nil {
			last = err
			continue
		}
		v, err := strconv.ParseUint(self.Stats.Raft["last_log_index"], 10, 64)
		if err != nil {
			last = fmt.Errorf("consul %s: raft last_log_index %q: %w", s.http, self.Stats.Raft["last_log_index"], err)
			continue
		}
		top = max(top, v)
	}
	if top == 0 {
		return 0, fmt.Errorf("no Consul server reported its Raft index: %v", last)
	}
	return top, nil
}

// storeCommits sums osm_store_commits_total over the live replicas: the
// transactions Consul committed for osm-server.
func storeCommits(ctx context.Context, rs []*replica) float64 {
	var n float64
	for _, r := range rs {
		if !r.proc.Alive() {
			continue
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+r.debug+"/metrics", nil)
		if err != nil {
			continue
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			if v, ok := strings.CutPrefix(sc.Text(), "osm_store_commits_total "); ok {
				f, _ := strconv.ParseFloat(v, 64)
				n += f
			}
		}
		resp.Body.Close()
	}
	return n
}

func getJSON(ctx context.Context, url string, out any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("GET %s: %s: %s", url, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(out)
}

// ms is d in milliseconds.
func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}
