//go:build dnsintegration

package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/internal/dnspublish/bindtest"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestDNSPublishingThroughTheServer runs osm-server with a dns: section
// against a real BIND: a Service annotated osm-vm.io/external-dns-name is
// published with its endpoints' addresses (from the static provider), the
// records follow the endpoints, and go when the annotation does; the
// name's own TXT record (someone's SPF record) is never touched.
func TestDNSPublishingThroughTheServer(t *testing.T) {
	const zone = "mesh.example.test"
	secret := bindtest.NewSecret(t)
	b := bindtest.Start(t, zone, secret, `shop	IN TXT "v=spf1 -all"`)
	bin := buildBinaries(t)
	s := newIdentityServer(t, bin)
	dir := filepath.Dir(s.dataDir)
	endpoints := filepath.Join(dir, "endpoints.yaml")
	writeEndpoints := func(ips ...string) {
		y := "services:\n  - name: bookstore\n    namespace: default\n    endpoints:\n"
		for _, ip := range ips {
			y += fmt.Sprintf("      - {ip: %s, port: 14001}\n", ip)
		}
		tmp := endpoints + ".tmp"
		if err := os.WriteFile(tmp, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, endpoints); err != nil {
			t.Fatal(err)
		}
	}
	writeEndpoints("10.0.0.5", "10.0.0.6")
	keyFile := writeTSIGKey(t, dir, secret)
	s.launch(t, "127.0.0.1:0", fmt.Sprintf(`providers:
  - {name: onprem, plugin: osm-provider-static, config: {file: %s}}
dns:
  zone: %s
  ownerID: e2e
  ttl: 30s
  rfc2136: {server: %s, tsigKeyName: osm-vm, tsigSecretFile: %s}
`, endpoints, zone, b.Addr, keyFile))
	apply := func(annotation string) {
		t.Helper()
		f := filepath.Join(t.TempDir(), "mesh.yaml")
		y := "apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {endpoints: {requireConnectedProxy: false}}\n---\n" +
			"apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata:\n  name: bookstore\n" + annotation + "spec: {ports: [{port: 14001}]}\n"
		if err := os.WriteFile(f, []byte(y), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := s.cli(t, "apply", "-f", f); err != nil {
			t.Fatalf("apply: %v\n%s", err, out)
		}
	}
	apply("  annotations: {osm-vm.io/external-dns-name: shop." + zone + "}\n")
	testwait.Until(t, "the service's endpoints published", b.DigIs("shop."+zone, "A", "10.0.0.5", "10.0.0.6"))
	testwait.Until(t, "the ownership record", b.DigIs("_osm-vm-owner.shop."+zone, "TXT", `"heritage=osm-vm,osm-vm/owner=e2e"`))

	code, body := debugGet(t, s.debug, "/api/v1/dns", "", "")
	if code != http.StatusOK || !strings.Contains(body, `"healthy": true`) || !strings.Contains(body, `"shop.`+zone+`"`) {
		t.Errorf("GET /api/v1/dns = %d %s; want the publisher healthy, owning shop.%s", code, body, zone)
	}

	writeEndpoints("10.0.0.7")
	testwait.Until(t, "the records follow the endpoints", b.DigIs("shop."+zone, "A", "10.0.0.7"))

	apply("")
	testwait.Until(t, "the records go with the annotation", b.DigIs("shop."+zone, "A"))
	testwait.Until(t, "the ownership record goes too", b.DigIs("_osm-vm-owner.shop."+zone, "TXT"))
	if got := b.Dig("shop."+zone, "TXT"); len(got) != 1 || got[0] != `"v=spf1 -all"` {
		t.Errorf("shop's TXT records = %q, want the SPF record untouched", got)
	}
}

// writeTSIGKey writes the key clause as tsig-keygen prints it (key osm-vm)
// into dir and returns the file's path.
func writeTSIGKey(t *testing.T, dir, secret string) string {
	t.Helper()
	keyFile := filepath.Join(dir, "osm-vm.tsig")
	if err := os.WriteFile(keyFile, []byte(fmt.Sprintf("key \"osm-vm\" {\n\talgorithm hmac-sha256;\n\tsecret \"%s\";\n};\n", secret)), 0o600); err != nil {
		t.Fatal(err)
	}
	return keyFile
}
