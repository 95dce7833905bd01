package render

import (
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/testing/protocmp"
	"google.golang.org/protobuf/types/known/anypb"
)

// memoMeshes are the specifications the Memo is checked against: the
// bookstore in both modes and the policy mesh, whose split subsets differ
// between callers of the same upstream.
func memoMeshes(t *testing.T) map[string]Mesh {
	eps := bookstoreEndpoints(t)
	return map[string]Mesh{
		"smi":        meshOf(bookstoreSpec(t, false).Snapshot(), eps),
		"permissive": meshOf(bookstoreSpec(t, true).Snapshot(), eps),
		"policy":     policyMesh(t),
	}
}

// TestMemoSameOutput renders every service's proxy of both flavours with
// one Memo shared by all of them, twice over (the second pass is served
// from the Memo), and checks that the output equals rendering without a
// Memo, and that callers of one upstream received the same message.
func TestMemoSameOutput(t *testing.T) {
	for name, m := range memoMeshes(t) {
		t.Run(name, func(t *testing.T) {
			memo := NewMemo()
			mm := m
			mm.Memo = memo
			byName := map[string]proto.Message{} // shared message by type and name
			reused := 0
			for pass := range 2 {
				for i, info := range m.Spec().Services() {
					for _, f := range []Flavor{Envoy, GRPC} {
						p := Proxy{Service: info.Service, Flavor: f, Address: netip.AddrFrom4([4]byte{10, 9, byte(pass), byte(i + 1)})}
						want := renderAll(t, m, p)
						got := renderAll(t, mm, p)
						if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
							t.Errorf("pass %d, proxy of %s (%s): with a Memo (-without +with):\n%s", pass, p.Service, f, diff)
						}
						for _, msg := range slices.Concat(got.Listeners, got.Routes, got.Clusters) {
							if l, ok := msg.(*listenerv3.Listener); ok && PerProxy(l.GetName()) {
								continue
							}
							k := fmt.Sprintf("%T %s", msg, labelOf(msg))
							prev, ok := byName[k]
							if !ok {
								byName[k] = msg
								continue
							}
							if prev == msg {
								reused++
							} else if !isLocal(msg) {
								// Local clusters and inbound routes are per
								// service, rendered once per group by the
								// caller; everything else comes from the Memo.
								t.Errorf("%s: a second message for the same resource; the Memo should have returned the first", k)
							}
						}
					}
				}
			}
			if reused == 0 || memo.Len() == 0 {
				t.Errorf("the Memo shared nothing (reused %d, holds %d)", reused, memo.Len())
			}
		})
	}
}

// isLocal reports whether msg is one of the resources rendered for the
// proxy's own service (a local cluster or an inbound route configuration).
func isLocal(msg proto.Message) bool {
	l := labelOf(msg)
	return strings.Contains(l, `"local|`) || strings.Contains(l, `"inbound|`)
}

// TestMemoForgetsAnotherSpecification: a Memo given a Mesh with another
// specification snapshot (or trust domain) does not return what it built
// for the previous one.
func TestMemoForgetsAnotherSpecification(t *testing.T) {
	ms := memoMeshes(t)
	memo := NewMemo()
	p := Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.1")}
	for _, step := range []struct {
		name string
		m    Mesh
	}{
		{"smi", ms["smi"]},
		{"permissive", ms["permissive"]},
		{"smi, other trust domain", meshIn(ms["smi"].Spec(), bookstoreEndpoints(t), "other.example")},
		{"smi again", ms["smi"]},
	} {
		m := step.m
		want := renderAll(t, m, p)
		m.Memo = memo
		got := renderAll(t, m, p)
		if diff := cmp.Diff(want, got, protocmp.Transform()); diff != "" {
			t.Errorf("%s: with the Memo used before for another Mesh (-want +got):\n%s", step.name, diff)
		}
	}
}

// TestMemoPackedIsBounded: the typed messages a Memo keeps for the
// validator are those of Anys inside the messages it holds, so rendering
// the same proxies again (or proxies on other addresses) does not add any,
// and a Memo given another specification lets them go.
func TestMemoPackedIsBounded(t *testing.T) {
	ms := memoMeshes(t)
	memo := NewMemo()
	m := ms["smi"]
	m.Memo = memo
	var sizes []int
	for pass := range 2 {
		for i, info := range m.Spec().Services() {
			for _, f := range []Flavor{Envoy, GRPC} {
				renderAll(t, m, Proxy{Service: info.Service, Flavor: f, Address: netip.AddrFrom4([4]byte{10, 7, byte(pass), byte(i + 1)})})
			}
		}
		sizes = append(sizes, memo.packed.Len())
	}
	// The Anys inside the Memo's messages, and inside the messages those
	// were packed from.
	held := map[*anypb.Any]bool{}
	for _, msg := range memo.msgs.All() {
		anysIn(msg.ProtoReflect(), held)
	}
	for n := 0; n != len(held); {
		n = len(held)
		for a := range held {
			if p, ok := memo.packed.Get(a); ok {
				anysIn(p.msg.ProtoReflect(), held)
			}
		}
	}
	if sizes[0] == 0 || sizes[1] != sizes[0] {
		t.Errorf("the Memo holds %v packed messages after each pass, want the same number (> 0) after both", sizes)
	}
	for a := range memo.packed.All() {
		if !held[a] {
			t.Errorf("the Memo keeps the message of an Any %q that none of its messages holds", a.GetTypeUrl())
		}
	}
	p := Proxy{Service: svc("bookbuyer"), Flavor: Envoy, Address: netip.MustParseAddr("10.0.0.1")}
	m = ms["permissive"]
	m.Memo = memo
	renderAll(t, m, p)
	for a := range memo.packed.All() {
		if held[a] {
			t.Errorf("after another specification, the Memo still keeps the message of an Any of the previous one")
			break
		}
	}
}

// anysIn adds the Anys below m (not inside them) to into.
func anysIn(m protoreflect.Message, into map[*anypb.Any]bool) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		into[a] = true
		return
	}
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		switch {
		case messageOf(fd) == nil:
		case fd.IsList():
			for i := range v.List().Len() {
				anysIn(v.List().Get(i).Message(), into)
			}
		case fd.IsMap():
			v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				anysIn(mv.Message(), into)
				return true
			})
		default:
			anysIn(v.Message(), into)
		}
		return true
	})
}

// TestListenersSplitPerProxy: PerProxyListeners are exactly the listeners
// PerProxy names, SharedListeners the others, and together Listeners.
func TestListenersSplitPerProxy(t *testing.T) {
	for name, m := range memoMeshes(t) {
		for i, info := range m.Spec().Services() {
			for _, f := range []Flavor{Envoy, GRPC} {
				p := Proxy{Service: info.Service, Flavor: f, Address: netip.AddrFrom4([4]byte{10, 8, 0, byte(i + 1)})}
				all, err := Listeners(m, p)
				if err != nil {
					t.Fatal(err)
				}
				own, err := PerProxyListeners(m, p)
				if err != nil {
					t.Fatal(err)
				}
				shared, err := SharedListeners(m, p)
				if err != nil {
					t.Fatal(err)
				}
				var wantOwn, wantShared []string
				for _, l := range all {
					if PerProxy(l.GetName()) {
						wantOwn = append(wantOwn, l.GetName())
					} else {
						wantShared = append(wantShared, l.GetName())
					}
				}
				if diff := cmp.Diff(names(own), wantOwn); diff != "" {
					t.Errorf("%s: PerProxyListeners of %s (%s) (-got +want):\n%s", name, p.Service, f, diff)
				}
				if diff := cmp.Diff(names(shared), wantShared); diff != "" {
					t.Errorf("%s: SharedListeners of %s (%s) (-got +want):\n%s", name, p.Service, f, diff)
				}
			}
		}
	}
}
