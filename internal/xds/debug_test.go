package xds

import (
	"bytes"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/base64"
	"encoding/json"
	"encoding/pem"
	"log/slog"
	"math/big"
	"net/url"
	"strings"
	"testing"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// testKeyPair returns a self-signed certificate (PEM) and its key as PEM
// and as PKCS#8 DER.
func testKeyPair(t *testing.T, serial int64, spiffe string) (certPEM, keyPEM, keyDER []byte, cert *x509.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	u, _ := url.Parse(spiffe)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(serial), Subject: pkix.Name{CommonName: "bookstore"}, URIs: []*url.URL{u},
		NotBefore: time.Now().Add(-time.Minute), NotAfter: time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	cert, _ = x509.ParseCertificate(der)
	keyDER, err = x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	certPEM = pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	keyPEM = pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	return certPEM, keyPEM, keyDER, cert
}

func typedConfig(t *testing.T, m proto.Message) *corev3.TransportSocket {
	t.Helper()
	a, err := anypb.New(m)
	if err != nil {
		t.Fatal(err)
	}
	return &corev3.TransportSocket{Name: "envoy.transport_sockets.tls", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: a}}
}

func inlineBytes(b []byte) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: b}}
}

func inlineString(s string) *corev3.DataSource {
	return &corev3.DataSource{Specifier: &corev3.DataSource_InlineString{InlineString: s}}
}

// jsonStrings returns every string in a JSON document, keys and values.
func jsonStrings(t *testing.T, doc []byte) []string {
	t.Helper()
	var v any
	if err := json.Unmarshal(doc, &v); err != nil {
		t.Fatalf("dump is not JSON: %v", err)
	}
	var out []string
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case string:
			out = append(out, v)
		case []any:
			for _, e := range v {
				walk(e)
			}
		case map[string]any:
			for k, e := range v {
				out = append(out, k)
				walk(e)
			}
		}
	}
	walk(v)
	return out
}

// TestConfigDumpRedactsKeys publishes, for one proxy, key material in every
// place a resource can carry it: the SDS secret as render makes it, a
// generic secret, inline keys inside typed Any transport sockets (PEM and
// DER, with a password and session ticket keys), and a PEM key in a field
// no annotation marks (metadata). The dump must hold none of it, in any
// encoding, and say what each redacted key belonged to.
func TestConfigDumpRedactsKeys(t *testing.T) {
	certPEM, keyPEM, keyDER, cert := testKeyPair(t, 0xabc123, "spiffe://osm.local/ns/default/sa/bookstore")
	certPEM2, keyPEM2, keyDER2, cert2 := testKeyPair(t, 0xdef456, "spiffe://osm.local/ns/default/sa/bookbuyer")
	const password, ticketKey = "hunter2-password", "ticket-key-0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

	secrets, err := render.Secrets(certPEM, keyPEM, certPEM)
	if err != nil {
		t.Fatal(err)
	}
	generic := &tlsv3.Secret{Name: "generic", Type: &tlsv3.Secret_GenericSecret{GenericSecret: &tlsv3.GenericSecret{Secret: inlineString(string(keyPEM2))}}}
	meta, _ := structpb.NewStruct(map[string]any{"note": "pasted by mistake: " + string(keyPEM2)})
	cluster := &clusterv3.Cluster{
		Name:     "default/bookwarehouse",
		Metadata: &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{"osm": meta}},
		TransportSocket: typedConfig(t, &tlsv3.UpstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
			TlsCertificates: []*tlsv3.TlsCertificate{{CertificateChain: inlineString(string(certPEM2)), PrivateKey: inlineBytes(keyDER2)}},
		}}),
	}
	listener := &listenerv3.Listener{
		Name: "inbound",
		FilterChains: []*listenerv3.FilterChain{{
			TransportSocket: typedConfig(t, &tlsv3.DownstreamTlsContext{
				CommonTlsContext: &tlsv3.CommonTlsContext{TlsCertificates: []*tlsv3.TlsCertificate{{
					CertificateChain: inlineBytes(certPEM), PrivateKey: inlineString(string(keyPEM)), Password: inlineString(password),
				}}},
				SessionTicketKeysType: &tlsv3.DownstreamTlsContext_SessionTicketKeys{SessionTicketKeys: &tlsv3.TlsSessionTicketKeys{
					Keys: []*corev3.DataSource{inlineString(ticketKey)},
				}},
			}),
		}},
	}

	c := cache.New(slog.New(slog.DiscardHandler))
	publish := func(typeURL string, msgs map[string]proto.Message) {
		t.Helper()
		var rs []*cache.Resource
		for name, m := range msgs {
			r, err := c.NewResource(name, m)
			if name == render.ServiceCertSecret {
				// As the publisher makes it: written as bytes, its
				// message decoded only for the dump.
				var b []byte
				if b, err = render.EncodeServiceCertSecret(nil, certPEM, keyPEM); err == nil {
					r, err = c.NewEncodedResource(name, (*tlsv3.Secret)(nil), b)
				}
			}
			if err != nil {
				t.Fatal(err)
			}
			rs = append(rs, r)
		}
		set, err := cache.NewSet(rs...)
		if err != nil {
			t.Fatal(err)
		}
		if err := c.Publish("proxy-1", typeURL, set); err != nil {
			t.Fatal(err)
		}
	}
	publish(resource.SecretType, map[string]proto.Message{secrets[0].Name: secrets[0], secrets[1].Name: secrets[1], "generic": generic})
	publish(resource.ClusterType, map[string]proto.Message{cluster.Name: cluster})
	publish(resource.ListenerType, map[string]proto.Message{listener.Name: listener})

	dump, err := Debug{Cache: c}.Config("proxy-1")
	if err != nil {
		t.Fatal(err)
	}
	forbidden := map[string][]byte{
		"a PEM private key":             []byte("PRIVATE KEY"),
		"the first key's DER":           keyDER,
		"the second key's DER":          keyDER2,
		"the first key's PEM body":      []byte(strings.Split(string(keyPEM), "\n")[1]),
		"the TLS certificate password":  []byte(password),
		"the session ticket key":        []byte(ticketKey),
		"the second key's PEM (base64)": []byte(base64.StdEncoding.EncodeToString(keyPEM2)[:40]),
	}
	for _, s := range jsonStrings(t, dump) {
		decoded, _ := base64.StdEncoding.DecodeString(s)
		for what, b := range forbidden {
			if strings.Contains(s, string(b)) || bytes.Contains(decoded, b) {
				t.Errorf("the dump holds %s in %.80q", what, s)
			}
		}
	}
	for _, want := range []string{
		"serial " + cert.SerialNumber.Text(16), "spiffe://osm.local/ns/default/sa/bookstore", "2030-01-02T03:04:05Z",
		"serial " + cert2.SerialNumber.Text(16), "spiffe://osm.local/ns/default/sa/bookbuyer",
	} {
		if !strings.Contains(string(dump), want) {
			t.Errorf("the dump does not name %q for a redacted key", want)
		}
	}
	// Certificates and the CA are not secrets: they stay.
	if !strings.Contains(string(dump), base64.StdEncoding.EncodeToString(certPEM)) {
		t.Error("the dump lost the certificate chain, which is no secret")
	}

	// Redaction works on copies: the cache still serves the key to its proxy.
	got := c.View("proxy-1")[resource.SecretType].Get(render.ServiceCertSecret).Message().(*tlsv3.Secret)
	if !bytes.Equal(got.GetTlsCertificate().GetPrivateKey().GetInlineBytes(), keyPEM) {
		t.Error("the dump changed the published secret: the proxy would be sent the redaction note instead of its key")
	}
}
