package spec

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

const egressDocs = `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: bookbuyer}
spec: {ports: [{port: 8080}]}
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: news-read}
spec: {matches: [{name: get, pathRegex: "/feed/.*", methods: [GET]}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: github}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [api.github.com]
  ports: [{number: 443, protocol: tls}]
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: news}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [newsfeed.news.com]
  ports: [{number: 80, protocol: http, targetPort: 443, originateTLS: true}, {number: 27017, protocol: tcp}]
  matches: [{kind: HTTPRouteGroup, name: news-read}]
`

func tryApplyYAML(t *testing.T, s *Spec, y string) (BatchResult, error) {
	t.Helper()
	docs, err := Parse([]byte(y), "egress.yaml")
	if err != nil {
		return BatchResult{}, err
	}
	return s.Apply(t.Context(), docs, ApplyOptions{})
}

func TestEgressSnapshot(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	if _, err := tryApplyYAML(t, s, egressDocs); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	buyer := mesh.ServiceAccount{Namespace: "default", Name: "bookbuyer"}
	got := snap.Egress(buyer)
	if len(got) != 3 {
		t.Fatalf("Egress(bookbuyer) = %+v, want 3 host ports", got)
	}
	gh, news := snap.st.vips[egressVIPKey("api.github.com")], snap.st.vips[egressVIPKey("newsfeed.news.com")]
	if !snap.VIPRange().Contains(gh) || !snap.VIPRange().Contains(news) || gh == news {
		t.Fatalf("egress VIPs %s, %s: want two distinct addresses in %s", gh, news, snap.VIPRange())
	}
	want := []EgressRoute{
		{Host: "api.github.com", VIP: gh, EgressPort: EgressPort{Number: 443, Protocol: "tls", TargetPort: 443}},
		{Host: "newsfeed.news.com", VIP: news, EgressPort: EgressPort{Number: 80, Protocol: "http", TargetPort: 443, OriginateTLS: true},
			Matches:      []HTTPRouteMatch{{Group: "news-read", Name: "get", PathRegex: "/feed/.*", Methods: []string{"GET"}}},
			RestrictedBy: []Key{{Kind: KindEgress, Namespace: "default", Name: "news"}}},
		{Host: "newsfeed.news.com", VIP: news, EgressPort: EgressPort{Number: 27017, Protocol: "tcp", TargetPort: 27017}},
	}
	if d := cmp.Diff(want, got, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("Egress (-want +got):\n%s", d)
	}
	if hosts := snap.EgressHosts(buyer); len(hosts) != 2 || hosts[0].Host != "api.github.com" || hosts[1].VIP != news {
		t.Errorf("EgressHosts = %+v", hosts)
	}
	if got := snap.Egress(mesh.ServiceAccount{Namespace: "default", Name: "bookthief"}); len(got) != 0 {
		t.Errorf("Egress(bookthief) = %+v, want nothing (not a source)", got)
	}
	if svc, _ := snap.Service(mesh.MeshService{Namespace: "default", Name: "bookbuyer"}); svc.VIP == gh || svc.VIP == news {
		t.Errorf("service VIP %s collides with an egress VIP", svc.VIP)
	}

	// The VIPs are stable across a reload, and released with the hosts.
	s2 := newTestSpec(t, s.store)
	if got := s2.Snapshot().st.vips[egressVIPKey("api.github.com")]; got != gh {
		t.Errorf("reloaded VIP of api.github.com = %s, want %s", got, gh)
	}
	if _, err := s.Delete(t.Context(), []Key{{Kind: KindEgress, Namespace: "default", Name: "github"}}, false); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Snapshot().st.vips[egressVIPKey("api.github.com")]; ok {
		t.Errorf("api.github.com keeps its VIP after its Egress was deleted")
	}
}

func TestEgressConflictingPortsRefused(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	if _, err := tryApplyYAML(t, s, egressDocs); err != nil {
		t.Fatal(err)
	}
	_, err := tryApplyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: github-plain}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [api.github.com]
  ports: [{number: 443, protocol: tcp}]
`)
	if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), `host "api.github.com" (spec.hosts[0]) port 443 is tls to port 443 in Egress default/github`) {
		t.Errorf("conflicting port: %v", err)
	}
}

func TestEgressInvalid(t *testing.T) {
	head := "apiVersion: osm-vm.io/v1alpha1\nkind: Egress\nmetadata: {name: e}\nspec:\n"
	ok := "  sources: [{kind: ServiceAccount, name: a}]\n  hosts: [api.example.com]\n  ports: [{number: 443, protocol: tls}]\n"
	for name, c := range map[string]struct{ spec, want string }{
		"empty":           {"  {}\n", "spec.sources: no sources"},
		"no hosts":        {"  sources: [{kind: ServiceAccount, name: a}]\n  ports: [{number: 443, protocol: tls}]\n", "spec.hosts: no hosts"},
		"bad host":        {strings.Replace(ok, "api.example.com", "API.example.com", 1), "spec.hosts[0]: host name \"API.example.com\" has upper-case letters"},
		"duplicate host":  {strings.Replace(ok, "[api.example.com]", "[a.example.com, a.example.com]", 1), "duplicate host"},
		"https":           {strings.Replace(ok, "protocol: tls", "protocol: https", 1), `protocol "https" is ambiguous`},
		"unknown proto":   {strings.Replace(ok, "protocol: tls", "protocol: htp", 1), `unsupported protocol "htp": want http, tcp or tls (did you mean "http"?)`},
		"tls originate":   {strings.Replace(ok, "protocol: tls", "protocol: tls, originateTLS: true", 1), "spec.ports[0].originateTLS: a tls port carries"},
		"port range":      {strings.Replace(ok, "number: 443", "number: 0", 1), "spec.ports[0].number: port 0 is out of range"},
		"matches no http": {ok + "  matches: [{kind: HTTPRouteGroup, name: g}]\n", "spec.matches: matches restrict HTTP requests"},
		"source port":     {strings.Replace(ok, "name: a}", "name: a, port: 80}", 1), "an Egress source has no port"},
		"unknown field":   {ok + "  ipAddresses: [10.0.0.0/8]\n", `unknown field "ipAddresses"`},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(head+c.spec), "e.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}
}

func TestEgressWarnsOfMissingSourcesAndGroups(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	res, err := tryApplyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: e}
spec:
  sources: [{kind: ServiceAccount, name: nobody}]
  hosts: [api.example.com]
  ports: [{number: 80, protocol: http}]
  matches: [{kind: HTTPRouteGroup, name: missing}]
`)
	if err != nil {
		t.Fatal(err)
	}
	w := strings.Join(res.Results[0].Warnings, "\n")
	for _, want := range []string{`spec.sources[0]: no Service runs as service account "nobody"`, `spec.matches[0]: HTTPRouteGroup "missing" not found`} {
		if !strings.Contains(w, want) {
			t.Errorf("warnings %q, want one containing %q", w, want)
		}
	}
}

func TestEgressHostsShareTheVIPRange(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	// A /30 has two usable addresses: one Service and one host fill it.
	_, err := tryApplyYAML(t, s, `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec: {outbound: {vipRange: 127.88.0.0/30}}
---
`+egressDocs)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), "has no free address for external host newsfeed.news.com") {
		t.Errorf("a full range: %v, want a conflict naming the external host", err)
	}
}

// TestKeysOfIsEachKindsRange checks keysOf (the range Egress reads) against
// a filter of every key, for every kind.
func TestKeysOfIsEachKindsRange(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	if _, err := tryApplyYAML(t, s, egressDocs); err != nil {
		t.Fatal(err)
	}
	snap := s.Snapshot()
	seen := 0
	for _, k := range kinds {
		var want []Key
		for _, key := range snap.keys {
			if key.Kind == k.kind {
				want = append(want, key)
			}
		}
		got := snap.keysOf(k.kind)
		seen += len(got)
		if d := cmp.Diff(want, got, cmpopts.EquateEmpty()); d != "" {
			t.Errorf("keysOf(%s) (-want +got):\n%s", k.kind, d)
		}
	}
	if seen != len(snap.keys) || seen == 0 {
		t.Errorf("keysOf over every kind found %d keys, want all %d", seen, len(snap.keys))
	}
}
