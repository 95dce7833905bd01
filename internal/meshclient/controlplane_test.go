package meshclient_test

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// testPKI is a mesh CA of trust domain osm.local with a machine's proxy
// certificate, as osm-server issues them.
type testPKI struct {
	caPEM  []byte
	ca     *x509.Certificate
	caKey  *ecdsa.PrivateKey
	client tls.Certificate
	serial int64
}

func newTestPKI(t *testing.T) *testPKI {
	t.Helper()
	p := &testPKI{}
	p.caKey = genKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1), Subject: pkix.Name{CommonName: "test mesh CA"},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		IsCA: true, BasicConstraintsValid: true, KeyUsage: x509.KeyUsageCertSign,
		URIs: []*url.URL{{Scheme: "spiffe", Host: "osm.local"}},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, p.caKey.Public(), p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	if p.ca, err = x509.ParseCertificate(der); err != nil {
		t.Fatal(err)
	}
	p.caPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	p.client = p.issue(t, "proxy", "spiffe://osm.local/ns/default/sa/bookbuyer/proxy/1", x509.ExtKeyUsageClientAuth)
	return p
}

func genKey(t *testing.T) *ecdsa.PrivateKey {
	t.Helper()
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}

// issue signs a certificate for 127.0.0.1 with the URI SAN uri.
func (p *testPKI) issue(t *testing.T, cn, uri string, usage x509.ExtKeyUsage) tls.Certificate {
	t.Helper()
	p.serial++
	u, err := url.Parse(uri)
	if err != nil {
		t.Fatal(err)
	}
	key := genKey(t)
	der, err := x509.CreateCertificate(rand.Reader, &x509.Certificate{
		SerialNumber: big.NewInt(p.serial + 1), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Now().Add(time.Hour),
		KeyUsage: x509.KeyUsageDigitalSignature, ExtKeyUsage: []x509.ExtKeyUsage{usage},
		URIs: []*url.URL{u}, IPAddresses: []net.IP{net.IPv4(127, 0, 0, 1)},
	}, p.ca, key.Public(), p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}
}

// startServer starts an HTTPS server on 127.0.0.1 presenting the control
// plane's certificate, or (impostor) a machine's service certificate
// valid for the same address.
func (p *testPKI) startServer(t *testing.T, h http.Handler, impostor bool) string {
	t.Helper()
	cert := p.issue(t, "osm-server", mesh.ControlPlaneSPIFFEID("osm.local"), x509.ExtKeyUsageServerAuth)
	if impostor {
		cert = p.issue(t, "bookstore.default.osm.local", "spiffe://osm.local/ns/default/sa/bookstore", x509.ExtKeyUsageServerAuth)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.TLS = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	srv.StartTLS()
	t.Cleanup(srv.Close)
	return srv.URL
}

// TestAgentCallsRefuseAnImpostor: a server whose certificate the mesh CA
// signed for a machine, valid for the server's address, is not the control
// plane: the agent's calls refuse it before sending anything.
func TestAgentCallsRefuseAnImpostor(t *testing.T) {
	p := newTestPKI(t)
	var asked bool
	h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		asked = true
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"identity":"x"}`))
	})
	if _, err := meshclient.FetchAgentConfig(t.Context(), p.startServer(t, h, false), p.caPEM, p.client); err != nil {
		t.Fatalf("agent config from the control plane: %v", err)
	}
	asked = false
	_, err := meshclient.FetchAgentConfig(t.Context(), p.startServer(t, h, true), p.caPEM, p.client)
	if !errors.Is(err, meshclient.ErrNotControlPlane) {
		t.Errorf("agent config from a machine's certificate: err = %v, want ErrNotControlPlane", err)
	}
	if asked {
		t.Error("the request reached the impostor")
	}
}
