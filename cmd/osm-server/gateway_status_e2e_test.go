package main

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

const gatewayStatusSpec = `apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ingress}
spec:
  gatewayClassName: osm-vm
  listeners:
    - {name: web, port: 8080, protocol: HTTP}
    - name: shop
      port: 8443
      protocol: HTTPS
      hostname: shop.example.com
      tls: {certificateRefs: [{name: shop-cert}]}
`

// TestGatewayProgrammedThroughTheServer: a Gateway's Programmed condition
// follows the machines connected as it to a running osm-server: Pending
// (with how to install one) while none is, True once a gateway proxy over
// mTLS ACKed its configuration, Pending again when it disconnects, False
// (Invalid) with the proxy's error detail when it NACKs; and a certificate
// problem its agent reports makes that listener's ResolvedRefs False
// (InvalidCertificateRef) while the machine is connected, and the machine
// is sent its listeners without that one (the others kept) until it
// reports the files good. The agent config of a gateway machine lists the
// listeners and their certificates.
func TestGatewayProgrammedThroughTheServer(t *testing.T) {
	bin := buildBinaries(t)
	s := newIdentityServer(t, bin)
	xdsAddr := freeAddr(t)
	s.launch(t, xdsAddr, "")
	f := filepath.Join(t.TempDir(), "gw.yaml")
	if err := os.WriteFile(f, []byte(gatewayStatusSpec), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := s.cli(t, "apply", "-f", f); err != nil {
		t.Fatalf("apply: %v\n%s", err, out)
	}
	// statusWhere polls `get gateways -o yaml` until ok holds of it.
	statusWhere := func(what string, ok func(string) bool) string {
		t.Helper()
		var out string
		for deadline := time.Now().Add(testwait.Bound(t)); ; {
			var err error
			out, err = s.cli(t, "get", "gateways", "-o", "yaml")
			if err == nil && ok(out) {
				return out
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: no such status: %v\n%s", what, err, out)
			}
			time.Sleep(100 * time.Millisecond) // a poll interval, not synchronisation
		}
	}
	status := func(what string, want ...string) string {
		t.Helper()
		return statusWhere(what+fmt.Sprintf(" (want %q)", want), func(out string) bool { return containsAll(out, want) })
	}
	status("no machine", "reason: Pending", "osm-agent install --gateway ingress --service ingress --namespace default")

	osm := xdstest.Server{API: s.api, XDS: xdsAddr, DataDir: s.dataDir}
	svc := mesh.MeshService{Namespace: "default", Name: "ingress"}
	pair := osm.Enroll(t, svc)
	p := osm.ConnectAs(t, pair, "gateway", "127.0.0.1")
	// The listeners the proxy holds (it ACKs every response).
	var mu sync.Mutex
	var lds []string
	go func() {
		for r := range p.Responses() {
			if r.GetTypeUrl() != resource.ListenerType {
				continue
			}
			var names []string
			for _, a := range r.GetResources() {
				var l listenerv3.Listener
				if a.UnmarshalTo(&l) == nil {
					names = append(names, l.GetName())
				}
			}
			mu.Lock()
			lds = names
			mu.Unlock()
		}
	}()
	const web, shop = "gateway|default/ingress|8080", "gateway|default/ingress|8443"
	waitLDS := func(what string, want ...string) {
		t.Helper()
		for deadline := time.Now().Add(testwait.Bound(t)); ; {
			mu.Lock()
			got := slices.Clone(lds)
			mu.Unlock()
			if slices.Equal(got, want) {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the gateway proxy holds listeners %q, want %q", what, got, want)
			}
			time.Sleep(20 * time.Millisecond) // a poll interval, not synchronisation
		}
	}
	waitLDS("connected", web, shop)
	out := status("machine connected", "reason: Programmed", "configured on 1 of 1 connected gateway machines")
	if strings.Contains(out, "InvalidCertificateRef") {
		t.Errorf("a listener's certificate is invalid before any report:\n%s", out)
	}

	ca, err := os.ReadFile(filepath.Join(s.dataDir, caCertFile))
	if err != nil {
		t.Fatal(err)
	}
	ac, err := meshclient.FetchAgentConfig(t.Context(), "https://"+s.api, ca, pair)
	if err != nil {
		t.Fatal(err)
	}
	if g := ac.Gateway; g == nil || g.Gateway != "default/ingress" || len(g.Listeners) != 2 ||
		g.Listeners[1] != (meshapi.GatewayListener{Name: "shop", Port: 8443, Protocol: "HTTPS", Hostname: "shop.example.com", CertificateNamespace: "default", CertificateName: "shop-cert"}) {
		t.Errorf("agent config gateway = %+v, want the Gateway's two listeners with shop's certificate", ac.Gateway)
	}
	const problem = "certificate file /etc/osm/gateway-tls/default/shop-cert/tls.crt: no such file"
	if err := meshclient.SendGatewayReport(t.Context(), "https://"+s.api, ca, pair, meshapi.GatewayReport{Certificates: []meshapi.CertificateProblem{{Listener: "shop", Error: problem}}}); err != nil {
		t.Fatal(err)
	}
	status("certificate reported bad", "reason: InvalidCertificateRef", problem)
	// Envoy would reject the port's listener for want of the files: the
	// machine is sent its listeners without that one, the others kept.
	waitLDS("certificate reported bad", web)
	if err := meshclient.SendGatewayReport(t.Context(), "https://"+s.api, ca, pair, meshapi.GatewayReport{}); err != nil {
		t.Fatal(err)
	}
	statusWhere("certificate fixed", func(out string) bool {
		return strings.Contains(out, "reason: Programmed") && !strings.Contains(out, "InvalidCertificateRef")
	})
	waitLDS("certificate fixed", web, shop)

	p.Close()
	status("machine gone", "reason: Pending", "no gateway machine is connected as Gateway default/ingress")

	const detail = "Error adding/updating listener(s) gateway|default/ingress|8443: Invalid path: /etc/osm/gateway-tls/default/shop-cert/tls.crt"
	bad := osm.ConnectRejecting(t, pair, "gateway", "127.0.0.1", map[string]string{resource.ListenerType: detail})
	go func() {
		for range bad.Responses() {
		}
	}()
	status("machine rejects", "reason: Invalid", detail)
}

func containsAll(s string, subs []string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
