package envoy

import (
	"testing"

	"github.com/google/go-cmp/cmp"
)

// realClusters is /clusters?format=json as Envoy writes it (proto field
// names, pretty-printed), cut to two clusters, with a field this Envoy
// API does not know, as a newer Envoy's would be.
const realClusters = `{
 "cluster_statuses": [
  {
   "name": "osm-xds",
   "circuit_breakers": {"thresholds": [{"max_connections": 1024, "max_pending_requests": 1024, "max_requests": 1024, "max_retries": 3}, {"priority": "HIGH", "max_connections": 1024, "max_pending_requests": 1024, "max_requests": 1024, "max_retries": 3}]},
   "host_statuses": [{"address": {"socket_address": {"address": "127.0.0.1", "port_value": 15128}}, "stats": [{"name": "cx_connect_fail"}, {"value": "1", "name": "cx_total"}], "health_status": {"eds_health_status": "HEALTHY"}, "weight": 1, "locality": {}}],
   "observability_name": "osm-xds"
  },
  {
   "name": "shop/db",
   "added_via_api": true,
   "host_statuses": [
    {"address": {"socket_address": {"address": "10.0.0.9", "port_value": 5432}}, "health_status": {"failed_outlier_check": true, "eds_health_status": "HEALTHY"}, "weight": 1, "success_rate": {"value": 12.5}},
    {"address": {"socket_address": {"address": "10.0.0.1", "port_value": 5432}}, "health_status": {"eds_health_status": "HEALTHY"}, "weight": 1},
    {"address": {"socket_address": {"address": "fd00::2", "port_value": 5432}}, "health_status": {"failed_outlier_check": true, "failed_active_health_check": true}, "weight": 1, "a_future_field": 7}
   ],
   "eds_service_name": "shop/db"
  }
 ]
}`

func TestEjectedHosts(t *testing.T) {
	got, err := EjectedHosts([]byte(realClusters))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string][]string{"shop/db": {"10.0.0.9:5432", "[fd00::2]:5432"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("EjectedHosts (-want +got):\n%s", diff)
	}
	if _, err := EjectedHosts([]byte("shop/db::10.0.0.9:5432::health_flags::/failed_outlier_check\n")); err == nil {
		t.Error("EjectedHosts of the text format: no error, want one (the agent asks for ?format=json)")
	}
}
