package spec

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// TestApplyWarnsOfUnservedServices: with HasEndpoints, apply warns where a
// TrafficSplit or TrafficTarget leads to a service nobody serves (no
// endpoints, and no split backend that has some), naming the document and
// the service; it is a warning, and the documents are stored.
func TestApplyWarnsOfUnservedServices(t *testing.T) {
	const (
		accountSvc = "apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: %s}\nspec: {serviceAccount: bookstore, ports: [{port: 80}]}\n---\n"
		split      = "apiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: split}\nspec:\n  service: bookstore\n  backends: [{service: bookstore-v1, weight: 80}, {service: bookstore-v2, weight: 20}]\n"
		target     = "apiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: to-bookstore}\nspec:\n  destination: {kind: ServiceAccount, name: bookstore}\n  sources: [{kind: ServiceAccount, name: bookbuyer}]\n  rules: [{kind: HTTPRouteGroup, name: all}]\n"
		routes     = "apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: all}\nspec: {matches: [{name: all, pathRegex: '/.*'}]}\n---\n"
	)
	services := fmt.Sprintf(accountSvc, "bookstore") + fmt.Sprintf(accountSvc, "bookstore-v1") + fmt.Sprintf(accountSvc, "bookstore-v2") + svcYAML("bookbuyer") + routes
	for _, tc := range []struct {
		name   string
		served []string // services with endpoints
		apply  string
		noHas  bool
		want   []string
	}{
		{name: "the root is empty, a backend serves", served: []string{"bookstore-v2"}, apply: split},
		{name: "the root serves", served: []string{"bookstore"}, apply: split},
		{name: "nobody serves the split", apply: split, want: []string{
			`TrafficSplit default/split (document 1, line 1): spec.service: service "bookstore" has no endpoints, nor has any backend of its TrafficSplit (bookstore-v1, bookstore-v2): calls to it fail until a machine of one of them enrolls (or a provider reports one)`,
		}},
		{name: "a TrafficTarget's destination services", served: []string{"bookstore-v1"}, apply: split + "---\n" + target, want: []string{
			`TrafficTarget default/to-bookstore (document 2, line 8): spec.destination: service "bookstore-v2" has no endpoints: calls to it fail until a machine of it enrolls (or a provider reports one)`,
		}},
		{name: "no HasEndpoints: no warning", apply: split, noHas: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := newTestSpec(t, store.NewMemory())
			if _, err := s.Apply(t.Context(), mustParse(t, services), ApplyOptions{}); err != nil {
				t.Fatal(err)
			}
			opts := ApplyOptions{HasEndpoints: func(svc mesh.MeshService) bool {
				for _, n := range tc.served {
					if svc == (mesh.MeshService{Namespace: "default", Name: n}) {
						return true
					}
				}
				return false
			}}
			if tc.noHas {
				opts.HasEndpoints = nil
			}
			res, err := s.Apply(t.Context(), mustParse(t, tc.apply), opts)
			if err != nil {
				t.Fatalf("apply: %v, want warnings only", err)
			}
			var got []string
			for _, r := range res.Results {
				got = append(got, r.Warnings...)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("warnings (-want +got):\n%s", diff)
			}
			if _, ok := s.Snapshot().Split(mesh.MeshService{Namespace: "default", Name: "bookstore"}); !ok {
				t.Error("the TrafficSplit was not stored")
			}
		})
	}
}
