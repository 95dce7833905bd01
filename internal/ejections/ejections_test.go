package ejections

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

func TestStore(t *testing.T) {
	now := time.Unix(1000, 0)
	s := New(func() time.Time { return now })
	r := meshapi.EjectionReport{Clusters: []meshapi.EjectedCluster{{Cluster: "shop/db", Hosts: []string{"10.0.0.2:5432"}}}}
	s.SetEjections("web-1", r)
	if got, want := s.Reports(), map[string]meshapi.EjectionReport{"web-1": r}; !cmp.Equal(got, want) {
		t.Errorf("Reports() = %v, want %v", got, want)
	}
	s.SetEjections("web-1", meshapi.EjectionReport{})
	if got := s.Reports(); len(got) != 0 {
		t.Errorf("after an empty report: %v, want none", got)
	}
	s.SetEjections("web-2", r)
	now = now.Add(meshapi.EjectionReportMaxAge + time.Second)
	if got := s.Reports(); len(got) != 0 {
		t.Errorf("a report older than %s: %v, want none (its agent stopped reporting)", meshapi.EjectionReportMaxAge, got)
	}
}
