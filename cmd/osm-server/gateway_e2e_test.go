package main

import (
	"crypto/x509"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

const gatewayE2ESpec = `apiVersion: v1
kind: Service
metadata: {name: echo}
spec:
  ports: [{name: http, port: 80, targetPort: 8080}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ingress}
spec:
  gatewayClassName: osm-vm
  listeners: [{name: web, port: 8080, protocol: HTTP, hostname: shop.example.com}]
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: HTTPRouteGroup
metadata: {name: all}
spec:
  matches: [{name: all, pathRegex: ".*"}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: ingress-to-echo}
spec:
  destination: {kind: ServiceAccount, name: echo, namespace: default}
  sources: [{kind: ServiceAccount, name: ingress, namespace: default}]
  rules: [{kind: HTTPRouteGroup, name: all}]
`

const gatewayE2ERoute = `apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: shop}
spec:
  parentRefs: [{name: ingress, sectionName: web}]
  rules: [{backendRefs: [{name: echo, port: 80}]}]
`

// gatewayState is the latest resources of each type a proxy received.
type gatewayState map[string][]*anypb.Any

func (g gatewayState) listener(name string) *listenerv3.Listener {
	for _, a := range g[resource.ListenerType] {
		var l listenerv3.Listener
		if a.UnmarshalTo(&l) == nil && l.GetName() == name {
			return &l
		}
	}
	return nil
}

// routeClusters returns the clusters the route configuration name sends
// to, by virtual host domain.
func (g gatewayState) routeClusters(name string) (map[string][]string, bool) {
	for _, a := range g[resource.RouteType] {
		var rc routev3.RouteConfiguration
		if a.UnmarshalTo(&rc) != nil || rc.GetName() != name {
			continue
		}
		out := map[string][]string{}
		for _, vh := range rc.GetVirtualHosts() {
			for _, r := range vh.GetRoutes() {
				out[vh.GetDomains()[0]] = append(out[vh.GetDomains()[0]], r.GetRoute().GetCluster())
			}
		}
		return out, true
	}
	return nil, false
}

// await reads p's responses into g until cond holds, failing the test
// at its deadline or when the stream ends.
func (g gatewayState) await(t *testing.T, p *xdstest.Proxy, what string, cond func() bool) {
	t.Helper()
	deadline := time.After(testwait.Bound(t))
	for !cond() {
		select {
		case r, ok := <-p.Responses():
			if !ok {
				t.Fatalf("ADS stream closed while waiting for %s", what)
			}
			g.take(t, r.GetTypeUrl(), r.GetResources())
		case <-deadline:
			t.Fatalf("no %s; received %v", what, g)
		}
	}
}

// take records a response's resources: the whole set for listeners,
// clusters and secrets; for endpoints and routes, which a server may send
// only the changed ones of, each by name over what was there.
func (g gatewayState) take(t *testing.T, typ string, res []*anypb.Any) {
	t.Helper()
	if typ != resource.EndpointType && typ != resource.RouteType {
		g[typ] = res
		return
	}
	byName := map[string]*anypb.Any{}
	for _, a := range append(slices.Clone(g[typ]), res...) {
		byName[resourceName(t, a)] = a
	}
	g[typ] = slices.Collect(maps.Values(byName))
}

func resourceName(t *testing.T, a *anypb.Any) string {
	t.Helper()
	m, err := a.UnmarshalNew()
	if err != nil {
		t.Fatal(err)
	}
	switch m := m.(type) {
	case interface{ GetClusterName() string }:
		return m.GetClusterName()
	case interface{ GetName() string }:
		return m.GetName()
	}
	t.Fatalf("a %s without a name", a.GetTypeUrl())
	return ""
}

func (g gatewayState) has(typ, name string) bool {
	for _, a := range g[typ] {
		m, err := a.UnmarshalNew()
		if n, ok := m.(interface{ GetName() string }); err == nil && ok && n.GetName() == name {
			return true
		}
	}
	return false
}

// TestGatewayThroughTheServer: a machine enrolled as Gateway default/ingress
// connects to a running osm-server over mTLS as a gateway proxy and
// receives, for an HTTPRoute attached to the Gateway's listener, the
// listener on its address, the route to the mesh service, the service's
// cluster and its own certificate; when the route is detached (deleted),
// the route configuration loses the route and the cluster goes. Then, on
// the same server, TCP and TLS listeners (gatewayL4ThroughTheServer).
func TestGatewayThroughTheServer(t *testing.T) {
	bin := buildBinaries(t)
	s := newIdentityServer(t, bin)
	xdsAddr := freeAddr(t)
	srv := s.launch(t, xdsAddr, "")
	dir := t.TempDir()
	for i, y := range []string{gatewayE2ESpec, gatewayE2ERoute} {
		f := filepath.Join(dir, []string{"spec.yaml", "route.yaml"}[i])
		if err := os.WriteFile(f, []byte(y), 0o644); err != nil {
			t.Fatal(err)
		}
		if out, err := s.cli(t, "apply", "-f", f); err != nil {
			t.Fatalf("apply %s: %v\n%s", f, err, out)
		}
	}
	out, err := s.cli(t, "get", "gateways", "-o", "yaml")
	if err != nil || !strings.Contains(out, "attachedRoutes: 1") || !strings.Contains(out, "type: Programmed") {
		t.Errorf("get gateways: %v\n%s\nwant the listener with attachedRoutes: 1 and a Programmed condition", err, out)
	}
	out, err = s.cli(t, "get", "httproutes", "-o", "yaml")
	if err != nil || !strings.Contains(out, "attached to listener web of Gateway default/ingress") || !strings.Contains(out, "controllerName: "+spec.GatewayControllerName) {
		t.Errorf("get httproutes: %v\n%s\nwant the parent status of the Gateway", err, out)
	}
	osm := xdstest.Server{API: s.api, XDS: xdsAddr, DataDir: s.dataDir}
	pair := osm.Enroll(t, mesh.MeshService{Namespace: "default", Name: "ingress"})
	if _, err := x509.ParseCertificate(pair.Certificate[0]); err != nil {
		t.Fatal(err)
	}
	p := osm.ConnectAs(t, pair, "gateway", "127.0.0.1", "default/echo")
	state := gatewayState{}
	const name = "gateway|default/ingress|8080"
	wait := func(what string, cond func() bool) {
		t.Helper()
		state.await(t, p, what, cond)
	}
	wait("listener, route, cluster and certificate", func() bool {
		routes, _ := state.routeClusters(name)
		l := state.listener(name)
		return l != nil && l.GetAddress().GetSocketAddress().GetAddress() == "127.0.0.1" &&
			slices.Equal(routes["shop.example.com"], []string{"default/echo"}) &&
			state.has(resource.ClusterType, "default/echo") && state.has(resource.SecretType, "service-cert")
	})

	if out, err := s.cli(t, "delete", "httproute", "shop"); err != nil {
		t.Fatalf("delete httproute: %v\n%s", err, out)
	}
	wait("route configuration without the route", func() bool {
		routes, ok := state.routeClusters(name)
		return ok && len(routes) == 0 && !state.has(resource.ClusterType, "default/echo") && state.listener(name) != nil
	})

	// A machine enrolled as a Gateway that is not applied is refused with
	// the cause (its stream ends; the server's log names the Gateway).
	stray := osm.ConnectAs(t, osm.Enroll(t, mesh.MeshService{Namespace: "default", Name: "nogw"}), "gateway", "127.0.0.1")
	for deadline := time.After(testwait.Bound(t)); ; {
		select {
		case _, ok := <-stray.Responses():
			if ok {
				continue
			}
		case <-deadline:
			t.Fatal("the stream of a gateway proxy without its Gateway is still open")
		}
		break
	}
	if out := srv.output(); !strings.Contains(out, `no Gateway \"nogw\" in namespace \"default\"`) {
		t.Errorf("server log does not name the missing Gateway:\n%s", out)
	}
	t.Run("TCP and TLS listeners", func(t *testing.T) { gatewayL4ThroughTheServer(t, s, osm) })
}
