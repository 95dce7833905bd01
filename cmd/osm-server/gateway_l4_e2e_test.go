package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	tcpproxyv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/tcp_proxy/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/render"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

const gatewayL4E2ESpec = `apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: db}
spec: {ports: [{name: pg, port: 5432, appProtocol: tcp}]}
---
apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: shop}
spec: {ports: [{name: tls, port: 8443, appProtocol: tcp}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: edge}
spec:
  gatewayClassName: osm-vm
  listeners:
  - {name: pg, port: 15432, protocol: TCP}
  - {name: tls, port: 18443, protocol: TLS, hostname: "*.example.com", tls: {mode: Passthrough}}
---
apiVersion: gateway.networking.k8s.io/v1alpha2
kind: TCPRoute
metadata: {name: pg}
spec:
  parentRefs: [{name: edge, sectionName: pg}]
  rules: [{backendRefs: [{name: db, port: 5432}]}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: TLSRoute
metadata: {name: shop}
spec:
  parentRefs: [{name: edge, sectionName: tls}]
  hostnames: [shop.example.com]
  rules: [{backendRefs: [{name: shop, port: 8443}]}]
---
apiVersion: specs.smi-spec.io/v1alpha4
kind: TCPRoute
metadata: {name: tcp}
spec: {matches: {name: all}}
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: edge-to-db}
spec:
  destination: {kind: ServiceAccount, name: db}
  sources: [{kind: ServiceAccount, name: edge}]
  rules: [{kind: TCPRoute, name: tcp}]
---
apiVersion: access.smi-spec.io/v1alpha3
kind: TrafficTarget
metadata: {name: edge-to-shop}
spec:
  destination: {kind: ServiceAccount, name: shop}
  sources: [{kind: ServiceAccount, name: edge}]
  rules: [{kind: TCPRoute, name: tcp}]
`

// tcpChains returns, for the listener name, each filter chain's SNI names
// (joined; "" for none) and the cluster its tcp_proxy forwards to.
func (g gatewayState) tcpChains(name string) map[string]string {
	l := g.listener(name)
	if l == nil {
		return nil
	}
	out := map[string]string{}
	for _, fc := range l.GetFilterChains() {
		var tp tcpproxyv3.TcpProxy
		if len(fc.GetFilters()) != 1 || fc.GetFilters()[0].GetTypedConfig().UnmarshalTo(&tp) != nil {
			continue
		}
		out[strings.Join(fc.GetFilterChainMatch().GetServerNames(), ",")] = tp.GetCluster()
	}
	return out
}

// gatewayL4ThroughTheServer (run by TestGatewayThroughTheServer, on its
// server, so the binaries are built once): a machine enrolled as Gateway
// default/edge connects to the running osm-server over mTLS as a gateway
// proxy and receives, for a TCPRoute on its TCP listener and a TLSRoute on
// its TLS Passthrough listener, both listeners on its address (a
// tcp_proxy chain, and an SNI chain for shop.example.com), the backends'
// mesh clusters, the refusal cluster, their endpoints and its
// certificates: a set that passes the validator as received (every Any
// unpacked, every reference resolved). Detaching the TLSRoute takes its
// chain and cluster away.
func gatewayL4ThroughTheServer(t *testing.T, s *identityServer, osm xdstest.Server) {
	f := filepath.Join(t.TempDir(), "spec.yaml")
	if err := os.WriteFile(f, []byte(gatewayL4E2ESpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := s.cli(t, "apply", "-f", f); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	for _, kind := range []string{"tcproutes", "tlsroutes"} {
		out, err := s.cli(t, "get", kind, "-o", "yaml")
		if err != nil || !strings.Contains(out, "of Gateway default/edge") || !strings.Contains(out, "reason: Accepted") {
			t.Errorf("get %s: %v\n%s\nwant the Gateway parent's status, accepted", kind, err, out)
		}
	}
	out, err := s.cli(t, "get", "gateways", "edge", "-o", "yaml")
	if err != nil || strings.Count(out, "attachedRoutes: 1") != 2 || !strings.Contains(out, "kind: TLSRoute") {
		t.Errorf("get gateway edge: %v\n%s\nwant both listeners with a route, the TLS one supporting TLSRoute", err, out)
	}

	p := osm.ConnectAs(t, osm.Enroll(t, mesh.MeshService{Namespace: "default", Name: "edge"}), "gateway", "127.0.0.1", "default/db", "default/shop")
	state := gatewayState{}
	wait := func(what string, cond func() bool) {
		t.Helper()
		state.await(t, p, what, cond)
	}
	const tcpName, tlsName = "gateway|default/edge|15432", "gateway|default/edge|18443"
	wait("TCP and TLS listeners, clusters, endpoints and certificates", func() bool {
		tcp, tls := state.tcpChains(tcpName), state.tcpChains(tlsName)
		return tcp[""] == "default/db" && tls["shop.example.com"] == "default/shop" &&
			state.listener(tcpName).GetAddress().GetSocketAddress().GetAddress() == "127.0.0.1" &&
			state.has(resource.ClusterType, "default/db") && state.has(resource.ClusterType, "default/shop") &&
			state.has(resource.ClusterType, render.GatewayRefuseCluster) &&
			len(state[resource.EndpointType]) == 2 && state.has(resource.SecretType, "service-cert") && state.has(resource.SecretType, "root-ca")
	})
	var all []proto.Message
	for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType, resource.SecretType} {
		for _, a := range state[typ] {
			m, err := a.UnmarshalNew()
			if err != nil {
				t.Fatalf("%s: %v", typ, err)
			}
			all = append(all, m)
		}
	}
	if err := render.Validate(render.Gateway, all...); err != nil {
		t.Errorf("the resources received do not validate: %v", err)
	}

	if out, err := s.cli(t, "delete", "tlsroute", "shop"); err != nil {
		t.Fatalf("delete tlsroute: %v\n%s", err, out)
	}
	wait("TLS listener without the route's chain", func() bool {
		tls := state.tcpChains(tlsName)
		_, shop := tls["shop.example.com"]
		return tls[""] == render.GatewayRefuseCluster && !shop && !state.has(resource.ClusterType, "default/shop")
	})
}
