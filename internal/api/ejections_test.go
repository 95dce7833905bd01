package api

import (
	"fmt"
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

func TestCheckEjectionReport(t *testing.T) {
	many := func(n int) []string {
		out := make([]string, n)
		for i := range out {
			out[i] = fmt.Sprintf("10.0.%d.%d:80", i/250, i%250)
		}
		return out
	}
	for _, tc := range []struct {
		name string
		rep  meshapi.EjectionReport
		want string // "" for none
	}{
		{"empty", meshapi.EjectionReport{}, ""},
		{"one", meshapi.EjectionReport{Clusters: []meshapi.EjectedCluster{{Cluster: "shop/db", Hosts: []string{"10.0.0.1:5432"}}}}, ""},
		{"too many clusters", meshapi.EjectionReport{Clusters: make([]meshapi.EjectedCluster, meshapi.MaxEjectedClusters+1)}, "clusters: 1025, more than 1024"},
		{"no cluster name", meshapi.EjectionReport{Clusters: []meshapi.EjectedCluster{{Hosts: []string{"10.0.0.1:80"}}}}, "clusters[0].cluster: want a cluster name of 1 to 256 bytes"},
		{"too many hosts", meshapi.EjectionReport{Clusters: []meshapi.EjectedCluster{{Cluster: "shop/db", Hosts: many(meshapi.MaxEjectedHosts + 1)}}}, "clusters[0].hosts: 1025, more than 1024"},
		{"long host", meshapi.EjectionReport{Clusters: []meshapi.EjectedCluster{{Cluster: "shop/db", Hosts: []string{strings.Repeat("a", 257)}}}}, "clusters[0].hosts[0]: want an address of 1 to 256 bytes"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := checkEjectionReport(tc.rep)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("checkEjectionReport = %v, want nil", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("checkEjectionReport = %v, want an error containing %q", err, tc.want)
			}
		})
	}
}
