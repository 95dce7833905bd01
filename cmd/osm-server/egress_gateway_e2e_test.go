package main

import (
	"crypto/tls"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/render"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

const egressGatewayE2ESpec = `apiVersion: osm-vm.io/v1alpha1
kind: EgressGateway
metadata: {name: egress}
spec: {port: 15444}
---
apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: github}
spec:
  sources: [{kind: ServiceAccount, name: bookbuyer}]
  hosts: [api.github.com]
  ports: [{number: 443, protocol: tls}, {number: 80, protocol: http, targetPort: 443, originateTLS: true}]
  gateway: {name: egress}
`

// TestEgressGatewayThroughTheServer: with an EgressGateway and an Egress
// through it applied to a running osm-server, a source proxy (bookbuyer)
// and the gateway machine (enrolled as default/egress, connected over
// mTLS as a gateway proxy) each receive their side: the source its
// listener on the host's VIP and the cluster to the gateway, whose
// endpoints are the gateway machine once it is connected (no provider
// lists it); the gateway its listener on its address, a filter
// chain per host and port, and the LOGICAL_DNS clusters. Both sets pass
// the validator as received. The source's hosts block maps the host to
// its VIP; the gateway's maps nothing. Deleting the Egress empties both.
func TestEgressGatewayThroughTheServer(t *testing.T) {
	bin := buildBinaries(t)
	s := newIdentityServer(t, bin)
	xdsAddr := freeAddr(t)
	dir := t.TempDir()
	const gwAddr = "127.0.0.2"
	endpoints := filepath.Join(dir, "endpoints.yaml")
	// No provider lists the gateway machine: its endpoint is its
	// connection.
	if err := os.WriteFile(endpoints, []byte("services: []\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	s.launch(t, xdsAddr, fmt.Sprintf("providers:\n  - {name: onprem, plugin: osm-provider-static, config: {file: %s}}\n", endpoints))
	egress := filepath.Join(dir, "egress.yaml")
	if err := os.WriteFile(egress, []byte(egressGatewayE2ESpec), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{bookstoreFile, egress} {
		if out, err := s.cli(t, "apply", "-f", f); err != nil {
			t.Fatalf("apply %s: %v\n%s", f, err, out)
		}
	}
	osm := xdstest.Server{API: s.api, XDS: xdsAddr, DataDir: s.dataDir}
	buyerPair := osm.Enroll(t, mesh.MeshService{Namespace: "default", Name: "bookbuyer"})
	gwPair := osm.Enroll(t, mesh.MeshService{Namespace: "default", Name: "egress"})
	buyer := osm.ConnectAs(t, buyerPair, "envoy", "127.0.0.1", "default/egress", "default/bookstore-v1", "default/bookstore-v2")
	gw := osm.ConnectAs(t, gwPair, "gateway", gwAddr)
	buyerState, gwState := gatewayState{}, gatewayState{}
	wait := func(p *xdstest.Proxy, state gatewayState, what string, cond func() bool) {
		t.Helper()
		state.await(t, p, what, cond)
	}
	const via = "egress|api.github.com|443|via=default/egress"
	wait(buyer, buyerState, "the source's listener, its cluster to the gateway and the gateway's endpoints", func() bool {
		l := buyerState.listener("egress|api.github.com|443")
		c := egressCluster(t, buyerState, via)
		return l != nil && c != nil && egressSNI(t, c) == "443.api.github.com" &&
			slices.Equal(loadAssignment(t, buyerState, "default/egress"), []string{gwAddr + ":15444"}) &&
			buyerState.has(resource.ClusterType, "egress|api.github.com|80|via=default/egress") &&
			len(buyerState[resource.EndpointType]) == 3 && // and the bookstore backends', for the validator
			buyerState.has(resource.SecretType, "service-cert")
	})
	const gwListener = "gateway|default/egress|15444"
	wait(gw, gwState, "the gateway's listener, clusters and certificate", func() bool {
		l := gwState.listener(gwListener)
		if l == nil || l.GetAddress().GetSocketAddress().GetAddress() != gwAddr {
			return false
		}
		var chains []string
		for _, fc := range l.GetFilterChains() {
			chains = append(chains, fc.GetFilterChainMatch().GetServerNames()...)
		}
		return slices.Equal(chains, []string{"80.api.github.com", "443.api.github.com"}) &&
			gwState.has(resource.ClusterType, "egress|api.github.com|443") &&
			gwState.has(resource.ClusterType, "egress|api.github.com|443|tls") &&
			gwState.has(resource.SecretType, "service-cert")
	})
	for name, c := range map[string]struct {
		flavor render.Flavor
		state  gatewayState
	}{"source": {render.Envoy, buyerState}, "gateway": {render.Gateway, gwState}} {
		var all []proto.Message
		for _, typ := range []string{resource.ListenerType, resource.RouteType, resource.ClusterType, resource.EndpointType, resource.SecretType} {
			for _, a := range c.state[typ] {
				m, err := a.UnmarshalNew()
				if err != nil {
					t.Fatalf("%s: %s: %v", name, typ, err)
				}
				all = append(all, m)
			}
		}
		if err := render.Validate(c.flavor, all...); err != nil {
			t.Errorf("%s: the configuration as received does not validate: %v", name, err)
		}
	}

	hostNames := func(pair tls.Certificate) []string {
		var out []string
		for _, h := range agentConfig(t, s.api, s.dataDir, pair).Hosts {
			out = append(out, h.Hostname)
		}
		return out
	}
	if got := hostNames(buyerPair); !slices.Contains(got, "api.github.com") {
		t.Errorf("the source's hosts block %v does not map api.github.com", got)
	}
	if got := hostNames(gwPair); slices.Contains(got, "api.github.com") {
		t.Errorf("the gateway's hosts block %v maps api.github.com: it must resolve the real name", got)
	}

	if out, err := s.cli(t, "delete", "egress", "github"); err != nil {
		t.Fatalf("delete egress: %v\n%s", err, out)
	}
	wait(gw, gwState, "the gateway without listener and clusters", func() bool {
		return gwState.listener(gwListener) == nil && len(gwState[resource.ClusterType]) == 0
	})
	wait(buyer, buyerState, "the source without its egress", func() bool {
		return buyerState.listener("egress|api.github.com|443") == nil && !buyerState.has(resource.ClusterType, via)
	})
}

func egressCluster(t *testing.T, state gatewayState, name string) *clusterv3.Cluster {
	t.Helper()
	for _, a := range state[resource.ClusterType] {
		var c clusterv3.Cluster
		if a.UnmarshalTo(&c) == nil && c.GetName() == name {
			return &c
		}
	}
	return nil
}

func egressSNI(t *testing.T, c *clusterv3.Cluster) string {
	t.Helper()
	var ctx tlsv3.UpstreamTlsContext
	if err := c.GetTransportSocket().GetTypedConfig().UnmarshalTo(&ctx); err != nil {
		t.Fatal(err)
	}
	return ctx.GetSni()
}

// loadAssignment returns the "ip:port" endpoints of the EDS resource name.
func loadAssignment(t *testing.T, state gatewayState, name string) []string {
	t.Helper()
	var out []string
	for _, a := range state[resource.EndpointType] {
		var cla endpointv3.ClusterLoadAssignment
		if err := a.UnmarshalTo(&cla); err != nil {
			t.Fatal(err)
		}
		if cla.GetClusterName() != name {
			continue
		}
		for _, l := range cla.GetEndpoints() {
			for _, e := range l.GetLbEndpoints() {
				sa := e.GetEndpoint().GetAddress().GetSocketAddress()
				out = append(out, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
			}
		}
	}
	return out
}
