package agenttest

import (
	"crypto/tls"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	bootstrapv3 "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	discoveryv3 "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/osm-vm/osm-vm/internal/agent/envoy"
	"github.com/osm-vm/osm-vm/internal/agent/sidecar"
	"github.com/osm-vm/osm-vm/internal/mesh"
)

// TestEnvoyRefusesAnImpostorControlPlane: a machine of the mesh holds its
// service's certificate from the mesh CA, which may authenticate a server.
// Envoy checks no host name, so with the CA alone in its validation context
// such a machine could serve any other Envoy its configuration and keys.
// The bootstrap's validation context requires the control plane's
// identity: the stand-in, which checks exactly what the context says (as
// Envoy does), refuses the impostor and accepts the real server; without
// the matcher it accepts the impostor too, as Envoy would.
func TestEnvoyRefusesAnImpostorControlPlane(t *testing.T) {
	ca := NewCA(t)
	impostorTLS := ca.ImpostorTLS(t)
	for _, tt := range []struct {
		name       string
		server     *tls.Config
		noMatchers bool
		wantRefuse bool
	}{
		{"the control plane", ca.ServerTLS(t), false, false},
		{"a machine's service certificate", impostorTLS, false, true},
		{"a machine's service certificate, no SAN matcher in the context", impostorTLS, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ads := StartADSWith(t, tt.server)
			b := writeEnvoyFiles(t, ca, ads.Addr, tt.noMatchers)
			_, err := adsOnce(t.Context(), b, func(string, string, ...any) {})
			refused := err != nil && strings.Contains(err.Error(), "SAN matcher")
			if refused != tt.wantRefuse {
				t.Errorf("ADS with %s: err = %v; want refused by the SAN matcher: %t", tt.name, err, tt.wantRefuse)
			}
		})
	}
}

// writeEnvoyFiles writes the agent's Envoy files for a proxy of ca into a
// temporary directory and returns the bootstrap; noMatchers takes the SAN
// matcher out of the validation context.
func writeEnvoyFiles(t *testing.T, ca *CA, xds string, noMatchers bool) *bootstrapv3.Bootstrap {
	t.Helper()
	dir := t.TempDir()
	id := mesh.NewProxyIdentity(mesh.MeshService{Namespace: "default", Name: "bookstore"})
	certPEM, keyPEM := ca.KeyPair(t, id.CommonName(), time.Hour)
	for name, data := range map[string][]byte{"proxy.crt": certPEM, "proxy.key": keyPEM, "ca.crt": ca.PEM} {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	d, err := envoy.New(sidecar.Options{DataDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	files, err := d.Files(sidecar.ProxyConfig{
		NodeID: id.CommonName(), Service: id.Service, XDSAddress: xds,
		CertFile: filepath.Join(dir, "proxy.crt"), KeyFile: filepath.Join(dir, "proxy.key"), CAFile: filepath.Join(dir, "ca.crt"),
		ControlPlaneID: ControlPlaneID,
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, envoy.SDSDir), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range files {
		data := f.Data
		if noMatchers && f.Name == envoy.CASDS {
			data = dropSANMatchers(t, data)
		}
		if err := os.WriteFile(filepath.Join(dir, f.Name), data, f.Mode); err != nil {
			t.Fatal(err)
		}
	}
	b, err := readBootstrap(filepath.Join(dir, envoy.BootstrapFile))
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// dropSANMatchers returns the SDS file data with the validation context's
// SAN matchers removed.
func dropSANMatchers(t *testing.T, data []byte) []byte {
	t.Helper()
	var dr discoveryv3.DiscoveryResponse
	if err := protojson.Unmarshal(data, &dr); err != nil {
		t.Fatal(err)
	}
	var s tlsv3.Secret
	if err := dr.GetResources()[0].UnmarshalTo(&s); err != nil {
		t.Fatal(err)
	}
	if len(s.GetValidationContext().GetMatchTypedSubjectAltNames()) == 0 {
		t.Fatal("the validation context has no SAN matcher to drop")
	}
	s.GetValidationContext().MatchTypedSubjectAltNames = nil
	a, err := anypb.New(&s)
	if err != nil {
		t.Fatal(err)
	}
	dr.Resources[0] = a
	out, err := envoy.MarshalJSON(&dr)
	if err != nil {
		t.Fatal(err)
	}
	return out
}
