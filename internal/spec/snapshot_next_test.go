package spec

import (
	"fmt"
	"net/netip"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
	"github.com/osm-vm/osm-vm/internal/store"
)

// snapshotIndexes is what a snapshot answers from, for comparing one
// built from the previous snapshot with one built from scratch.
type snapshotIndexes struct {
	Keys        []Key
	Services    map[mesh.MeshService]ServiceInfo
	Ordered     []ServiceInfo
	ByAccount   map[mesh.ServiceAccount][]mesh.MeshService
	TTByDest    map[mesh.ServiceAccount][]Key
	DstBySource map[mesh.ServiceAccount][]mesh.ServiceAccount
	Splits      []Key
	SplitRoot   map[mesh.MeshService]Key
	Pairs       map[[2]mesh.ServiceAccount]bool
	Gateway     map[string]map[string][]gateway.RouteName
	Config      MeshConfigSpec
	Resilience  *resilienceIndex
	// Answers are the resilience queries' answers (their caches are per
	// snapshot, their index shared).
	Answers map[string]any
}

func indexesOf(s *Snapshot) snapshotIndexes {
	callers := []mesh.ServiceAccount{{Namespace: "shop", Name: "x"}, {Namespace: "shop", Name: "y"}}
	return snapshotIndexes{s.keys, s.services, s.ordered, s.byAccount, s.ttByDest, s.dstBySource, s.splits, s.splitRoot, s.pairs, s.gateway.Attached(), s.config.Spec,
		s.resilience, resilienceAnswers(s, callers)}
}

// A snapshot published after a change of Services only, built from the
// one before, answers what one built from scratch does.
func TestSnapshotAfterServiceChangesIsAsBuiltFromScratch(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	apply := func(y string) {
		t.Helper()
		if _, err := s.Apply(t.Context(), mustParse(t, y), ApplyOptions{}); err != nil {
			t.Fatalf("Apply: %v", err)
		}
	}
	svc := func(name, account string, port int) string {
		return fmt.Sprintf("---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: %s, namespace: shop}\nspec: {serviceAccount: %s, ports: [{port: %d}]}\n", name, account, port)
	}
	if _, err := s.Apply(t.Context(), bookstoreDocs(t), ApplyOptions{}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	apply(svc("a", "x", 80) + svc("c", "x", 80) + svc("e", "y", 80))
	// Policies naming Services that come and go, and a caller's Retry.
	apply(`apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: p, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: b}, {group: "", kind: Service, name: c, sectionName: http}]
  timeouts: {request: 3s}
  retry: {attempts: 1}
---
apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: q, namespace: shop}
spec:
  targetRefs: [{group: "", kind: Service, name: z}]
  circuitBreaker: {maxRequests: 10}
  loadBalancer: {type: RingHash, hashOn: [{header: x-user}]}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: UpstreamTrafficSetting
metadata: {name: u, namespace: shop}
spec:
  host: 0a
  connectionSettings: {tcp: {connectTimeout: 2s}}
  rateLimit: {local: {http: {requests: 10, unit: second}}}
---
apiVersion: policy.openservicemesh.io/v1alpha1
kind: Retry
metadata: {name: r, namespace: shop}
spec:
  source: {kind: ServiceAccount, name: x}
  destinations: [{kind: Service, name: b}, {kind: Service, name: z}]
  retryPolicy: {retryOn: 5xx, perTryTimeout: 1s, numRetries: 3, retryBackoffBaseInterval: 10ms}
`)
	check := func(step string) {
		t.Helper()
		got := s.Snapshot()
		want := newSnapshot(got.st, got.version)
		if diff := cmp.Diff(indexesOf(want), indexesOf(got), cmpopts.EquateComparable(netip.Addr{}), cmpopts.EquateEmpty(), cmp.AllowUnexported(resilienceIndex{})); diff != "" {
			t.Errorf("%s: snapshot (-from scratch +from the one before):\n%s", step, diff)
		}
	}
	steps := []struct{ name, yaml string }{
		{"create between", svc("b", "x", 80)},
		{"create first and last", svc("0a", "y", 80) + svc("z", "z", 80)},
		{"configure the port", svc("b", "x", 81)},
		{"name the port", "---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: c, namespace: shop}\nspec: {serviceAccount: x, ports: [{name: http, port: 80}, {port: 90, appProtocol: grpc}]}\n"},
		{"move to another account", svc("c", "y", 80)},
		{"the last of an account moves", svc("z", "x", 80)},
	}
	for _, st := range steps {
		apply(st.yaml)
		check(st.name)
	}
	for _, name := range []string{"a", "0a", "z"} {
		if _, err := s.Delete(t.Context(), []Key{{Kind: KindService, Namespace: "shop", Name: name}}, false); err != nil {
			t.Fatalf("Delete %s: %v", name, err)
		}
		check("delete " + name)
	}
}
