package agenttest

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/wrapperspb"
)

// FakeEnvoyClustersEnv names a file of FakeCluster (JSON) that the Envoy
// stand-in adds to its bootstrap's static clusters on its admin /clusters,
// read at each request: a test writes the hosts an outlier detector
// ejected there.
const FakeEnvoyClustersEnv = "OSM_AGENTTEST_FAKE_ENVOY_CLUSTERS"

// FakeCluster is a cluster the stand-in reports as received over CDS.
type FakeCluster struct {
	Name  string     `json:"name"`
	Hosts []FakeHost `json:"hosts"`
}

// FakeHost is one of its hosts; Ejected is outlier detection's
// failed_outlier_check.
type FakeHost struct {
	Address string `json:"address"` // ip:port
	Ejected bool   `json:"ejected,omitempty"`
}

// WriteFakeClusters writes cs to path for FakeEnvoyClustersEnv (through a
// rename, so the stand-in never reads half a file).
func WriteFakeClusters(path string, cs []FakeCluster) error {
	data, err := json.Marshal(cs)
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// fakeClusters is what /clusters lists: the bootstrap's static clusters
// (added_via_api false, healthy) and those of FakeEnvoyClustersEnv's file.
type fakeCluster struct {
	FakeCluster
	viaAPI bool
}

func clustersOf(b *bootstrapv3.Bootstrap) ([]fakeCluster, error) {
	var out []fakeCluster
	for _, c := range b.GetStaticResources().GetClusters() {
		out = append(out, fakeCluster{FakeCluster: FakeCluster{Name: c.GetName(), Hosts: staticHosts(c)}})
	}
	path := os.Getenv(FakeEnvoyClustersEnv)
	if path == "" {
		return out, nil
	}
	data, err := os.ReadFile(path)
	if os.IsNotExist(err) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	var dyn []FakeCluster
	if err := json.Unmarshal(data, &dyn); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for _, c := range dyn {
		out = append(out, fakeCluster{FakeCluster: c, viaAPI: true})
	}
	return out, nil
}

func staticHosts(c *clusterv3.Cluster) []FakeHost {
	var out []FakeHost
	for _, le := range c.GetLoadAssignment().GetEndpoints() {
		for _, lb := range le.GetLbEndpoints() {
			sa := lb.GetEndpoint().GetAddress().GetSocketAddress()
			out = append(out, FakeHost{Address: net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue())))})
		}
	}
	return out
}

// Envoy's defaults for a cluster without circuit breakers, as /clusters
// prints them for both priorities.
const (
	defaultMaxConnections = 1024
	defaultMaxPending     = 1024
	defaultMaxRequests    = 1024
	defaultMaxRetries     = 3
)

// hostStats are the per-host counters and gauges Envoy prints, in the
// text format's (sorted) order.
var hostStats = []string{"cx_active", "cx_connect_fail", "cx_total", "rq_active", "rq_error", "rq_success", "rq_timeout", "rq_total"}

// serveClusters answers GET /clusters as Envoy's admin does
// (source/server/admin/clusters_handler.cc): the text format by default,
// admin.v3.Clusters as JSON with ?format=json.
func serveClusters(b *bootstrapv3.Bootstrap) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		cs, err := clustersOf(b)
		if err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
			return
		}
		if r.URL.Query().Get("format") == "json" {
			data, err := clustersJSON(cs)
			if err != nil {
				http.Error(w, err.Error(), http.StatusInternalServerError)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.Write(data)
			return
		}
		w.Header().Set("Content-Type", "text/plain; charset=UTF-8")
		writeClustersText(w, cs)
	}
}

func writeClustersText(w io.Writer, cs []fakeCluster) {
	for _, c := range cs {
		if c.viaAPI { // the mesh's clusters carry outlier detection
			for _, l := range []string{"success_rate_average", "success_rate_ejection_threshold", "local_origin_success_rate_average", "local_origin_success_rate_ejection_threshold"} {
				fmt.Fprintf(w, "%s::outlier::%s::-1\n", c.Name, l)
			}
		}
		for _, prio := range []string{"default", "high"} {
			fmt.Fprintf(w, "%s::%s_priority::max_connections::%d\n", c.Name, prio, defaultMaxConnections)
			fmt.Fprintf(w, "%s::%s_priority::max_pending_requests::%d\n", c.Name, prio, defaultMaxPending)
			fmt.Fprintf(w, "%s::%s_priority::max_requests::%d\n", c.Name, prio, defaultMaxRequests)
			fmt.Fprintf(w, "%s::%s_priority::max_retries::%d\n", c.Name, prio, defaultMaxRetries)
		}
		fmt.Fprintf(w, "%s::added_via_api::%t\n", c.Name, c.viaAPI)
		for _, h := range c.Hosts {
			p := c.Name + "::" + h.Address + "::"
			for _, s := range hostStats {
				fmt.Fprintf(w, "%s%s::0\n", p, s)
			}
			flags := "healthy"
			if h.Ejected {
				flags = "/failed_outlier_check"
			}
			fmt.Fprintf(w, "%shostname::\n%shealth_flags::%s\n%sweight::1\n%sregion::\n%szone::\n%ssub_zone::\n%scanary::false\n%spriority::0\n%ssuccess_rate::-1\n%slocal_origin_success_rate::-1\n",
				p, p, flags, p, p, p, p, p, p, p, p)
		}
	}
}

func clustersJSON(cs []fakeCluster) ([]byte, error) {
	var out adminv3.Clusters
	for _, c := range cs {
		st := &adminv3.ClusterStatus{Name: c.Name, AddedViaApi: c.viaAPI, CircuitBreakers: &clusterv3.CircuitBreakers{}}
		for _, p := range []corev3.RoutingPriority{corev3.RoutingPriority_DEFAULT, corev3.RoutingPriority_HIGH} {
			st.CircuitBreakers.Thresholds = append(st.CircuitBreakers.Thresholds, &clusterv3.CircuitBreakers_Thresholds{Priority: p,
				MaxConnections: wrapperspb.UInt32(defaultMaxConnections), MaxPendingRequests: wrapperspb.UInt32(defaultMaxPending),
				MaxRequests: wrapperspb.UInt32(defaultMaxRequests), MaxRetries: wrapperspb.UInt32(defaultMaxRetries)})
		}
		for _, h := range c.Hosts {
			host, port, err := net.SplitHostPort(h.Address)
			if err != nil {
				return nil, fmt.Errorf("cluster %s: host %q: %w", c.Name, h.Address, err)
			}
			pn, err := strconv.Atoi(port)
			if err != nil {
				return nil, fmt.Errorf("cluster %s: host %q: %w", c.Name, h.Address, err)
			}
			hs := &adminv3.HostStatus{
				Address: &corev3.Address{Address: &corev3.Address_SocketAddress{SocketAddress: &corev3.SocketAddress{
					Address: host, PortSpecifier: &corev3.SocketAddress_PortValue{PortValue: uint32(pn)}}}},
				HealthStatus: &adminv3.HostHealthStatus{FailedOutlierCheck: h.Ejected, EdsHealthStatus: corev3.HealthStatus_HEALTHY},
				Weight:       1,
			}
			for _, s := range hostStats {
				typ := adminv3.SimpleMetric_COUNTER
				if strings.HasSuffix(s, "_active") {
					typ = adminv3.SimpleMetric_GAUGE
				}
				hs.Stats = append(hs.Stats, &adminv3.SimpleMetric{Name: s, Type: typ})
			}
			st.HostStatuses = append(st.HostStatuses, hs)
		}
		out.ClusterStatuses = append(out.ClusterStatuses, st)
	}
	// Envoy writes its JSON with the proto field names, pretty-printed.
	return protojson.MarshalOptions{UseProtoNames: true, Multiline: true}.Marshal(&out)
}
