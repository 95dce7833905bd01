package main

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/provider"
)

func entry(node, nodeAddr, id, addr string, port int, statuses ...string) *api.ServiceEntry {
	e := &api.ServiceEntry{
		Node:    &api.Node{Node: node, Address: nodeAddr, Datacenter: "dc1"},
		Service: &api.AgentService{ID: id, Service: "web", Address: addr, Port: port},
	}
	for i, s := range statuses {
		e.Checks = append(e.Checks, &api.HealthCheck{CheckID: fmt.Sprint(i), Status: s})
	}
	return e
}

func show(eps []provider.Endpoint) []string {
	var out []string
	for _, e := range eps {
		var ls []string
		for _, k := range slices.Sorted(maps.Keys(e.Labels)) {
			ls = append(ls, k+"="+e.Labels[k])
		}
		out = append(out, e.String()+" "+strings.Join(ls, " "))
	}
	return out
}

func TestInstances(t *testing.T) {
	tagged := entry("n1", "10.0.0.1", "web-1", "", 8080, api.HealthPassing)
	tagged.Service.Tags = []string{"v2", "mesh", "v2"}
	tagged.Service.Meta = map[string]string{"version": "2.1"}
	entries := []*api.ServiceEntry{
		tagged, // node address
		entry("n2", "10.0.0.2", "web-2", "10.9.0.2", 8080, api.HealthPassing, api.HealthPassing), // service address wins
		entry("n3", "10.0.0.3", "web-3", "", 8080, api.HealthPassing, api.HealthWarning),
		entry("n4", "10.0.0.4", "web-4", "", 8080, api.HealthWarning, api.HealthCritical),
		entry("n5", "10.0.0.5", "web-5", "", 8080, api.HealthMaint),
		entry("n6", "web6.example", "web-6", "", 8080), // no checks: passing, but no IP
		entry("n7", "10.0.0.7", "web-7", "", 0),
		entry("n8", "10.0.0.8", "web-8", "::ffff:10.0.0.8", 8080),
	}
	for _, tc := range []struct {
		name           string
		includeWarning bool
		want           []string
	}{
		{"passing only", false, []string{
			"10.0.0.1:8080 consul-service=web consul-service-id=web-1 datacenter=dc1 meta.version=2.1 node=n1 tags=mesh,v2",
			"10.9.0.2:8080 consul-service=web consul-service-id=web-2 datacenter=dc1 node=n2",
			"10.0.0.8:8080 consul-service=web consul-service-id=web-8 datacenter=dc1 node=n8",
		}},
		{"warning counts", true, []string{
			"10.0.0.1:8080 consul-service=web consul-service-id=web-1 datacenter=dc1 meta.version=2.1 node=n1 tags=mesh,v2",
			"10.9.0.2:8080 consul-service=web consul-service-id=web-2 datacenter=dc1 node=n2",
			"10.0.0.3:8080 consul-health=warning consul-service=web consul-service-id=web-3 datacenter=dc1 node=n3",
			"10.0.0.8:8080 consul-service=web consul-service-id=web-8 datacenter=dc1 node=n8",
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, skipped := instances(entries, tc.includeWarning)
			var eps []provider.Endpoint
			for _, in := range got {
				eps = append(eps, in.ep)
			}
			if diff := cmp.Diff(tc.want, show(eps)); diff != "" {
				t.Errorf("instances (-want +got):\n%s", diff)
			}
			if len(skipped) != len(entries)-len(got) {
				t.Errorf("%d skipped, %d kept of %d entries", len(skipped), len(got), len(entries))
			}
		})
	}
}

func TestMergeEndpointsDeduplicatesAndSorts(t *testing.T) {
	a, _ := instances([]*api.ServiceEntry{
		entry("n2", "10.0.0.2", "web-b", "", 80),
		entry("n1", "10.0.0.9", "web-a", "", 80),
	}, false)
	b, _ := instances([]*api.ServiceEntry{entry("n0", "10.0.0.2", "other", "", 80)}, false)
	got := show(mergeEndpoints(a, b))
	want := []string{
		"10.0.0.2:80 consul-service=web consul-service-id=other datacenter=dc1 node=n0",
		"10.0.0.9:80 consul-service=web consul-service-id=web-a datacenter=dc1 node=n1",
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("mergeEndpoints (-want +got):\n%s", diff)
	}
}
