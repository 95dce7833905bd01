package envoy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"slices"
	"strconv"

	adminv3 "github.com/envoyproxy/go-control-plane/envoy/admin/v3"
	"google.golang.org/protobuf/encoding/protojson"
)

// maxClustersBody bounds what the agent reads of Envoy's /clusters: a
// proxy with 10,000 clusters of 3 hosts each answers about 60 MiB in JSON
// (every host's counters), so the bound is generous.
const maxClustersBody = 256 << 20

// Ejected reads Envoy's admin /clusters?format=json on 127.0.0.1:adminPort
// (an admin.v3.Clusters) and returns, by cluster name, the addresses
// (ip:port) of the hosts outlier detection has ejected right now
// (health_status.failed_outlier_check), sorted. Clusters with none are
// left out.
func Ejected(ctx context.Context, hc *http.Client, adminPort uint16) (map[string][]string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://127.0.0.1:%d/clusters?format=json", adminPort), nil)
	if err != nil {
		return nil, err
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("envoy admin /clusters: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("envoy admin /clusters: %s", resp.Status)
	}
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxClustersBody))
	if err != nil {
		return nil, fmt.Errorf("envoy admin /clusters: %w", err)
	}
	return EjectedHosts(data)
}

// EjectedHosts returns the ejected hosts of the clusters in data, Envoy's
// /clusters?format=json (see Ejected). Fields this Envoy API does not
// know (a newer Envoy's) are passed over.
func EjectedHosts(data []byte) (map[string][]string, error) {
	var cs adminv3.Clusters
	if err := (protojson.UnmarshalOptions{DiscardUnknown: true}).Unmarshal(data, &cs); err != nil {
		return nil, fmt.Errorf("envoy admin /clusters: %w", err)
	}
	out := map[string][]string{}
	for _, c := range cs.GetClusterStatuses() {
		for _, h := range c.GetHostStatuses() {
			if !h.GetHealthStatus().GetFailedOutlierCheck() {
				continue
			}
			sa := h.GetAddress().GetSocketAddress()
			if sa == nil {
				continue // a pipe: no backend of the mesh
			}
			out[c.GetName()] = append(out[c.GetName()], net.JoinHostPort(sa.GetAddress(), strconv.Itoa(int(sa.GetPortValue()))))
		}
	}
	for _, hosts := range out {
		slices.Sort(hosts)
	}
	return out, nil
}
