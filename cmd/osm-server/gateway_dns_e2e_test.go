//go:build dnsintegration

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"github.com/osm-vm/osm-vm/internal/dnspublish/bindtest"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/internal/xds/xdstest"
)

// TestDNSPublishingGateways runs osm-server with a dns: section against a
// real BIND: the host names of a Gateway (its listener's, its routes')
// are published with the addresses of the gateway machines connected as
// that Gateway; the records follow the machines as they come and go, and
// a route's name goes when the route does.
func TestDNSPublishingGateways(t *testing.T) {
	const zone = "mesh.example.test"
	secret := bindtest.NewSecret(t)
	b := bindtest.Start(t, zone, secret)
	bin := buildBinaries(t)
	s := newIdentityServer(t, bin)
	dir := filepath.Dir(s.dataDir)
	keyFile := writeTSIGKey(t, dir, secret)
	xdsAddr := freeAddr(t)
	s.launch(t, xdsAddr, fmt.Sprintf("dns:\n  zone: %s\n  ownerID: e2e\n  ttl: 30s\n  rfc2136: {server: %s, tsigKeyName: osm-vm, tsigSecretFile: %s}\n", zone, b.Addr, keyFile))
	apply := func(y string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "mesh.yaml")
		if err := os.WriteFile(f, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := s.cli(t, "apply", "-f", f); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
	}
	apply(`apiVersion: v1
kind: Service
metadata: {name: echo}
spec: {ports: [{name: http, port: 80}]}
---
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: ingress}
spec:
  gatewayClassName: osm-vm
  listeners:
  - {name: shop, port: 8080, protocol: HTTP, hostname: shop.` + zone + `}
  - {name: any, port: 8081, protocol: HTTP}
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: api}
spec:
  parentRefs: [{name: ingress, sectionName: any}]
  hostnames: [api.` + zone + `]
  rules: [{backendRefs: [{name: echo, port: 80}]}]
`)
	osm := xdstest.Server{API: s.api, XDS: xdsAddr, DataDir: s.dataDir}
	gw := mesh.MeshService{Namespace: "default", Name: "ingress"}
	first := osm.ConnectAs(t, osm.Enroll(t, gw), "gateway", "127.0.55.1")
	testwait.Until(t, "the listener's host name published", b.DigIs("shop."+zone, "A", "127.0.55.1"))
	testwait.Until(t, "the route's host name published", b.DigIs("api."+zone, "A", "127.0.55.1"))
	testwait.Until(t, "the route's name's ownership record", b.DigIs("_osm-vm-owner.api."+zone, "TXT", `"heritage=osm-vm,osm-vm/owner=e2e"`))

	osm.ConnectAs(t, osm.Enroll(t, gw), "gateway", "127.0.55.2")
	testwait.Until(t, "a second gateway machine added", b.DigIs("shop."+zone, "A", "127.0.55.1", "127.0.55.2"))
	first.Close()
	testwait.Until(t, "the first machine's address gone with it", b.DigIs("shop."+zone, "A", "127.0.55.2"))

	if out, err := s.cli(t, "delete", "httproute", "api"); err != nil {
		t.Fatalf("delete httproute: %v\n%s", err, out)
	}
	testwait.Until(t, "the route's name gone with the route", b.DigIs("api."+zone, "A"))
	testwait.Until(t, "its ownership record too", b.DigIs("_osm-vm-owner.api."+zone, "TXT"))
	testwait.Until(t, "the listener's name stays", b.DigIs("shop."+zone, "A", "127.0.55.2"))
}
