package spec

import (
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/store/boltstore"
)

func openBolt(t testing.TB, dir string) *boltstore.Bolt {
	t.Helper()
	st, err := boltstore.Open(dir)
	if err != nil {
		t.Fatal(err)
	}
	return st
}

func TestRestartKeepsPoliciesAndVIPs(t *testing.T) {
	dir := t.TempDir()
	st := openBolt(t, dir)
	s := newTestSpec(t, st)
	if _, err := s.Apply(t.Context(), bookstoreDocs(t), ApplyOptions{}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	before := s.Snapshot()
	if err := st.Close(); err != nil {
		t.Fatal(err)
	}

	st = openBolt(t, dir)
	defer st.Close()
	s = newTestSpec(t, st)
	after := s.Snapshot()
	if diff := cmp.Diff(before.Services(), after.Services(), cmp.Comparer(func(a, b ServiceInfo) bool {
		return cmp.Equal(a.Service, b.Service) && a.VIP == b.VIP && a.ServiceAccount == b.ServiceAccount && cmp.Equal(a.Ports, b.Ports)
	})); diff != "" {
		t.Errorf("services after restart (-before +after):\n%s", diff)
	}
	if got, want := len(after.Objects()), len(bookstoreDocs(t)); got != want {
		t.Errorf("documents after restart = %d, want %d", got, want)
	}
	if got, want := after.Version(), before.Version(); got != want {
		t.Errorf("version after restart = %d, want %d", got, want)
	}
	res, err := s.Apply(t.Context(), bookstoreDocs(t), ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff(allActions(bookstoreDocs(t), Unchanged), actions(res)); diff != "" {
		t.Errorf("re-apply after restart (-want +got):\n%s", diff)
	}
	// A new service after the restart gets an address no one holds.
	if _, err := s.Apply(t.Context(), mustParse(t, svcYAML("newcomer")), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	seen := map[string]bool{}
	for _, info := range s.Snapshot().Services() {
		if seen[info.VIP.String()] {
			t.Errorf("VIP %s reused", info.VIP)
		}
		seen[info.VIP.String()] = true
	}
}
