package render

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestPolicyChangeReachesOnlyItsCallers renders every proxy of the
// bookstore mesh, in both flavours and in the publisher's form (stamped
// resources with a Memo), before and after a BackendTrafficPolicy on
// bookwarehouse (a connect timeout, in its cluster; a request timeout, in
// its callers' routes): the resources that change are the cluster and
// outbound routes of bookwarehouse, in the proxies of its callers
// (bookstore, bookstore-v1 and -v2, of service account bookstore) only; every other resource of every proxy keeps
// its bytes, and the other proxies keep their Inputs.
func TestPolicyChangeReachesOnlyItsCallers(t *testing.T) {
	eps := bookstoreEndpoints(t)
	before := meshOf(bookstoreSpec(t, false).Snapshot(), eps)
	s := bookstoreSpec(t, false)
	applyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: BackendTrafficPolicy
metadata: {name: bookwarehouse, namespace: default}
spec:
  targetRefs: [{group: "", kind: Service, name: bookwarehouse}]
  timeouts: {connect: 2s, request: 10s}
`)
	after := meshOf(s.Snapshot(), eps)
	before.Memo, after.Memo = NewMemo(), NewMemo()
	// The bookstore split root runs as the service account bookstore too.
	callers := []string{"bookstore", "bookstore-v1", "bookstore-v2"}
	changedIn := map[string]int{}
	for _, info := range before.Spec().Services() {
		for _, f := range []Flavor{Envoy, GRPC} {
			p := Proxy{Service: info.Service, Flavor: f, Address: netip.MustParseAddr("10.0.0.2")}
			label := fmt.Sprintf("%s %s", f, info.Service.Name)
			a, b := publishedForm(t, before, p), publishedForm(t, after, p)
			var changed []string
			for name, x := range a {
				if y, ok := b[name]; !ok || string(x) != string(y) {
					changed = append(changed, name)
				}
			}
			for name := range b {
				if _, ok := a[name]; !ok {
					changed = append(changed, name)
				}
			}
			slices.Sort(changed)
			caller := slices.Contains(callers, info.Service.Name)
			for _, name := range changed {
				if !caller || !strings.Contains(name, "default/bookwarehouse") || strings.Contains(name, "inbound|") {
					t.Errorf("%s: %s changed", label, name)
				}
			}
			if caller {
				changedIn[label] = len(changed)
				// gRPC's cluster leaves the connect timeout out (its
				// clients ignore it).
				if want := map[Flavor]int{Envoy: 2, GRPC: 1}[f]; len(changed) != want {
					t.Errorf("%s calls bookwarehouse: changed %v, want its outbound route and (Envoy) its cluster", label, changed)
				}
			}
			ia, err := InputsOf(before, p)
			if err != nil {
				t.Fatal(err)
			}
			ib, err := InputsOf(after, p)
			if err != nil {
				t.Fatal(err)
			}
			if ia.Equal(ib) == caller {
				t.Errorf("%s: Inputs equal = %v, want %v", label, ia.Equal(ib), !caller)
			}
		}
	}
	if len(changedIn) != 2*len(callers) {
		t.Errorf("callers rendered: %v, want %v in both flavours", changedIn, callers)
	}
}

// publishedForm is p's listeners, route configurations and clusters as
// the publisher takes them (stamped where they are), by type and name.
func publishedForm(t *testing.T, m Mesh, p Proxy) map[string][]byte {
	t.Helper()
	out := map[string][]byte{}
	add := func(msgs []proto.Message, enc []Encoded, err error) {
		t.Helper()
		if err != nil {
			t.Fatalf("proxy of %s: %v", p.Service, err)
		}
		for _, x := range msgs {
			out[labelOf(x)] = marshalled(t, x)
		}
		for _, e := range enc {
			out[e.TypeURL+" "+e.Name] = e.Bytes
		}
	}
	own, enc, err := PerProxyListenerResources(m, p, nil)
	add(msgs(own), enc, err)
	shared, enc, err := SharedListenerResources(m, p, nil)
	add(msgs(shared), enc, err)
	rs, enc, err := RouteResources(m, p, nil)
	add(msgs(rs), enc, err)
	cs, enc, err := ClusterResources(m, p, nil)
	add(msgs(cs), enc, err)
	return out
}
