package spec

import (
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

func mustParse(t *testing.T, y string) []Document {
	t.Helper()
	docs, err := Parse([]byte(y), "")
	if err != nil {
		t.Fatalf("Parse: %v", err)
	}
	return docs
}

func svcYAML(name string) string {
	return fmt.Sprintf("apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: %s}\nspec: {ports: [{port: 80}]}\n---\n", name)
}

const splitYAML = "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: split}\nspec:\n  service: %s\n  backends:\n    - {service: %s, weight: 1}\n"

func TestApplyReferenceErrors(t *testing.T) {
	tests := []struct {
		name  string
		setup string
		apply string
		want  string
	}{
		{
			name:  "split backend unknown",
			setup: svcYAML("bookstore") + svcYAML("bookstore-v1"),
			apply: fmt.Sprintf(splitYAML, "bookstore", "bookstore-v3"),
			want:  `TrafficSplit default/split (document 1, line 1): spec.backends[0].service: service "bookstore-v3" not found in namespace "default": apply a Service named "bookstore-v3" first or in the same batch (did you mean "bookstore-v1"?)`,
		},
		{
			name:  "split root unknown",
			setup: svcYAML("bookstore") + svcYAML("bookstore-v1"),
			apply: fmt.Sprintf(splitYAML, "bookstor", "bookstore-v1"),
			want:  `TrafficSplit default/split (document 1, line 1): spec.service: service "bookstor" not found in namespace "default": apply a Service named "bookstor" first or in the same batch (did you mean "bookstore"?)`,
		},
		{
			name:  "duplicate document in batch",
			apply: svcYAML("web") + svcYAML("web"),
			want:  "Service default/web (document 2, line 6): Service default/web appears twice in this batch (also Service default/web (document 1, line 1)): keep one",
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSpec(t, store.NewMemory())
			if tc.setup != "" {
				if _, err := s.Apply(t.Context(), mustParse(t, tc.setup), ApplyOptions{}); err != nil {
					t.Fatalf("setup: %v", err)
				}
			}
			before := s.Snapshot().Version()
			_, err := s.Apply(t.Context(), mustParse(t, tc.apply), ApplyOptions{})
			if !errors.Is(err, ErrInvalid) {
				t.Fatalf("Apply error = %v, want ErrInvalid", err)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", got, tc.want)
			}
			if got := s.Snapshot().Version(); got != before {
				t.Errorf("version changed to %d after a failed apply, want %d", got, before)
			}
		})
	}
}

func TestApplyInSameBatchAndAtomic(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	// The split and its services in one batch, split first: order does not matter.
	good := fmt.Sprintf(splitYAML, "web", "web-v1") + "---\n" + svcYAML("web") + svcYAML("web-v1")
	if _, err := s.Apply(t.Context(), mustParse(t, good), ApplyOptions{}); err != nil {
		t.Fatalf("Apply: %v", err)
	}
	// One bad document: nothing of the batch is applied.
	bad := svcYAML("other") + strings.Replace(fmt.Sprintf(splitYAML, "web", "nope"), "name: split", "name: split2", 1)
	if _, err := s.Apply(t.Context(), mustParse(t, bad), ApplyOptions{}); err == nil {
		t.Fatal("Apply of a batch with a bad split succeeded")
	}
	if _, ok := s.Snapshot().Service(mesh.MeshService{Namespace: "default", Name: "other"}); ok {
		t.Error("service other was applied from a failed batch")
	}
}

func TestApplyWarnings(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	y := svcYAML("bookstore") + `apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: tt}
spec:
  destination: {kind: ServiceAccount, name: bookstor}
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  rules: [{kind: HTTPRouteGroup, name: routes}]
`
	res, err := s.Apply(t.Context(), mustParse(t, y), ApplyOptions{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	got := res.Results[1].Warnings
	want := []string{
		`TrafficTarget default/tt (document 2, line 6): spec.destination: no Service runs as service account "bookstor" in namespace "default" yet (did you mean "bookstore"?)`,
		`TrafficTarget default/tt (document 2, line 6): spec.sources[0]: no Service runs as service account "bookbuyer" in namespace "default" yet`,
		`TrafficTarget default/tt (document 2, line 6): spec.rules[0]: HTTPRouteGroup "routes" not found in namespace "default" yet: the rule allows nothing until it exists`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	if got := res.Results[1].Action; got != Created {
		t.Errorf("action = %s, want created", got)
	}
}

// TestApplyWarnsOfSplitMatchesGRPCNeverMatches: a TrafficSplit limited to
// matches no gRPC call can meet means nothing to gRPC clients.
func TestApplyWarnsOfSplitMatchesGRPCNeverMatches(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	y := `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookstore}
spec: {ports: [{port: 14001, appProtocol: grpc}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookstore-v1}
spec: {ports: [{port: 14001, appProtocol: grpc}]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: routes}
spec:
  matches:
    - {name: get-books, pathRegex: '/books.*', methods: [GET]}
    - {name: by-method, pathRegex: '/bookstore.Bookstore/.*', headers: {':method': POST}}
    - {name: grpc, pathRegex: '/bookstore.Bookstore/.*', methods: [POST]}
---
apiVersion: split.smi-spec.io/v1alpha4
kind: TrafficSplit
metadata: {name: split}
spec:
  service: bookstore
  backends: [{service: bookstore-v1, weight: 100}]
  matches: [{kind: HTTPRouteGroup, name: routes}]
`
	res, err := s.Apply(t.Context(), mustParse(t, y), ApplyOptions{})
	if err != nil {
		t.Fatalf("Apply: %v", err)
	}
	got := res.Results[3].Warnings
	want := []string{
		`TrafficSplit default/split (document 4, line 20): spec.matches[0]: HTTPRouteGroup "routes" match "get-books" allows only GET, but every gRPC call is a POST, so gRPC clients of "bookstore" never match it: their calls go to "bookstore" itself while it has endpoints of its own (and to the split's backends while it has none)`,
		`TrafficSplit default/split (document 4, line 20): spec.matches[0]: HTTPRouteGroup "routes" match "by-method" matches the pseudo-header ":method", which gRPC clients never match, so gRPC clients of "bookstore" never match it: their calls go to "bookstore" itself while it has endpoints of its own (and to the split's backends while it has none)`,
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
}

func TestDeleteErrors(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	if _, err := s.Apply(t.Context(), mustParse(t, svcYAML("web")+svcYAML("web-v1")+fmt.Sprintf(splitYAML, "web", "web-v1")), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name    string
		keys    []Key
		wantErr error
		want    string
	}{
		{"service used by split", []Key{{Kind: KindService, Namespace: "default", Name: "web-v1"}}, ErrConflict,
			"conflict: Service default/web-v1 is used by TrafficSplit default/split: delete or change the TrafficSplit first, or in the same batch"},
		{"not found", []Key{{Kind: KindService, Namespace: "default", Name: "web-v2"}}, ErrNotFound,
			`not found: Service default/web-v2 does not exist (did you mean "web-v1"?)`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			_, err := s.Delete(t.Context(), tc.keys, false)
			if !errors.Is(err, tc.wantErr) {
				t.Fatalf("Delete error = %v, want %v", err, tc.wantErr)
			}
			if got := err.Error(); got != tc.want {
				t.Errorf("error\n got: %s\nwant: %s", got, tc.want)
			}
		})
	}
	// Split and service together succeed.
	if _, err := s.Delete(t.Context(), []Key{{Kind: KindService, Namespace: "default", Name: "web-v1"}, {Kind: KindTrafficSplit, Namespace: "default", Name: "split"}}, false); err != nil {
		t.Errorf("Delete split and backend together: %v", err)
	}
}

func TestDryRunAndDiff(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	if _, err := s.Apply(t.Context(), mustParse(t, svcYAML("web")), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	v := s.Snapshot().Version()
	changed := strings.Replace(svcYAML("web"), "port: 80", "port: 8080", 1) + svcYAML("api")
	res, err := s.Apply(t.Context(), mustParse(t, changed), ApplyOptions{Diff: true})
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Snapshot().Version(); got != v {
		t.Errorf("diff changed the version to %d, want %d", got, v)
	}
	if diff := cmp.Diff(map[string]Action{"Service default/web": Configured, "Service default/api": Created}, actions(res)); diff != "" {
		t.Errorf("actions (-want +got):\n%s", diff)
	}
	wantDiff := `--- live/Service default/web
+++ applied/Service default/web
@@ -6,6 +6,6 @@
 spec:
   ports:
     - appProtocol: http
-      port: 80
-      targetPort: 80
+      port: 8080
+      targetPort: 8080
   serviceAccount: web
`
	if got := res.Results[0].Diff; got != wantDiff {
		t.Errorf("diff\n got:\n%s\nwant:\n%s", got, wantDiff)
	}
	res, err = s.Apply(t.Context(), mustParse(t, changed), ApplyOptions{DryRun: true})
	if err != nil || !res.DryRun || s.Snapshot().Version() != v {
		t.Errorf("dry run: res %+v, err %v, version %d (want %d)", res, err, s.Snapshot().Version(), v)
	}
}

func TestVIPsUniqueUnderConcurrentApplies(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	var wg sync.WaitGroup
	errs := make(chan error, 40)
	for i := range 40 {
		wg.Go(func() {
			_, err := s.Apply(t.Context(), mustParse(t, svcYAML(fmt.Sprintf("svc-%d", i))), ApplyOptions{})
			errs <- err
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	seen := map[netip.Addr]mesh.MeshService{}
	for _, info := range s.Snapshot().Services() {
		if other, dup := seen[info.VIP]; dup {
			t.Errorf("VIP %s given to %s and %s", info.VIP, other, info.Service)
		}
		seen[info.VIP] = info.Service
	}
	if got, want := len(seen), 40; got != want {
		t.Errorf("distinct VIPs = %d, want %d", got, want)
	}
}

func TestVIPRangeChangeAndExhaustion(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	if _, err := s.Apply(t.Context(), mustParse(t, svcYAML("a")+svcYAML("b")), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	a := mesh.MeshService{Namespace: "default", Name: "a"}
	before, _ := s.Snapshot().Service(a)
	mc := "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {outbound: {vipRange: %s}}\n"
	res, err := s.Apply(t.Context(), mustParse(t, fmt.Sprintf(mc, "127.88.0.0/30")), ApplyOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if diff := cmp.Diff([]string{"the outbound vipRange changed: 2 services get new virtual IPs (default/a, default/b); agents rewrite their hosts files on the next update"}, res.Warnings); diff != "" {
		t.Errorf("warnings (-want +got):\n%s", diff)
	}
	after, _ := s.Snapshot().Service(a)
	if !netip.MustParsePrefix("127.88.0.0/30").Contains(after.VIP) || after.VIP == before.VIP {
		t.Errorf("VIP after range change = %s (was %s), want one in 127.88.0.0/30", after.VIP, before.VIP)
	}
	// A /30 holds two services: the third does not fit.
	_, err = s.Apply(t.Context(), mustParse(t, svcYAML("c")), ApplyOptions{})
	want := "conflict: outbound vipRange 127.88.0.0/30 has no free address for service default/c (2 in use): widen spec.outbound.vipRange in MeshConfig"
	if !errors.Is(err, ErrConflict) || err.Error() != want {
		t.Errorf("Apply third service: error %v, want %s", err, want)
	}
}
