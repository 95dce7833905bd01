// Package xdstest drives a running osm-server from tests the way a machine
// does: it creates a join token with the admin API, enrolls a proxy with a
// locally generated key, and opens an mTLS ADS stream as that proxy. The
// provider end-to-end tests use it to check what a connected proxy is sent.
//
// It is test support: only _test.go files import it.
package xdstest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/pem"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"
	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/specclient"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// Server is a running osm-server.
type Server struct {
	// API is the HTTPS API address (host:port), XDS the xDS address.
	API, XDS string
	// DataDir is the server's data dir, read for admin.token and ca.crt.
	DataDir string
}

func (s Server) admin(t *testing.T) (*http.Client, string, []byte) {
	t.Helper()
	tok, err := os.ReadFile(filepath.Join(s.DataDir, "admin.token"))
	if err != nil {
		t.Fatal(err)
	}
	ca, err := os.ReadFile(filepath.Join(s.DataDir, "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	return hc, strings.TrimSpace(string(tok)), ca
}

// Apply applies YAML documents through the admin API.
func (s Server) Apply(t *testing.T, yaml string) {
	t.Helper()
	hc, tok, _ := s.admin(t)
	if _, err := specclient.New(meshclient.NewAdmin("https://"+s.API, hc, tok)).Apply(t.Context(), []spec.File{{Source: "test.yaml", Data: yaml}}, false); err != nil {
		t.Fatalf("apply: %v", err)
	}
}

// Enroll creates a single-use token for svc and enrolls a proxy with it.
func (s Server) Enroll(t *testing.T, svc mesh.MeshService) tls.Certificate {
	t.Helper()
	hc, tok, ca := s.admin(t)
	created, err := meshclient.NewAdmin("https://"+s.API, hc, tok).CreateToken(t.Context(), meshapi.CreateTokenRequest{Service: svc})
	if err != nil {
		t.Fatalf("token create: %v", err)
	}
	block, _ := pemDecode(ca)
	key, _ := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	res, err := meshclient.Enroll(t.Context(), nil, meshclient.JoinRequest{Server: "https://" + s.API, Token: created.Secret, CACertHash: meshapi.CAHash(block), Service: svc}, key)
	if err != nil {
		t.Fatalf("enroll: %v", err)
	}
	keyDER, err := x509.MarshalPKCS8PrivateKey(key)
	if err != nil {
		t.Fatal(err)
	}
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: keyDER})
	pair, err := tls.X509KeyPair(res.CertificatePEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return pair
}

// Proxy is an Envoy-flavoured ADS stream of an enrolled proxy.
type Proxy struct {
	cn     string
	stream discovery.AggregatedDiscoveryService_StreamAggregatedResourcesClient
	resp   chan *discovery.DiscoveryResponse
	close  func()
}

// Close ends the proxy's stream and connection, as a machine that goes
// away does.
func (p *Proxy) Close() { p.close() }

// Connect opens the proxy's ADS stream, announcing address as its
// advertise address, and subscribes to the EDS resources named. It first
// waits for the xDS listener (see WaitXDS).
func (s Server) Connect(t *testing.T, cert tls.Certificate, address string, eds ...string) *Proxy {
	t.Helper()
	return s.connect(t, cert, "envoy", address, false, eds, nil)
}

// ConnectAs opens the ADS stream of a proxy whose node metadata osm.flavor
// is flavor ("envoy" or "gateway": an ingress gateway's Envoy) and
// subscribes, as Envoy does, to every cluster, listener, route
// configuration and secret (wildcard) and to the EDS resources named.
func (s Server) ConnectAs(t *testing.T, cert tls.Certificate, flavor, address string, eds ...string) *Proxy {
	t.Helper()
	return s.connect(t, cert, flavor, address, true, eds, nil)
}

// ConnectGRPC opens the ADS stream of a proxyless gRPC client (node
// metadata osm.flavor "grpc") announcing address, subscribing to the EDS
// resources named.
func (s Server) ConnectGRPC(t *testing.T, cert tls.Certificate, address string, eds ...string) *Proxy {
	t.Helper()
	return s.connect(t, cert, "grpc", address, false, eds, nil)
}

// ConnectRejecting is ConnectAs for a proxy that rejects (NACKs) every
// response of the type URLs in reject, with the error detail given.
func (s Server) ConnectRejecting(t *testing.T, cert tls.Certificate, flavor, address string, reject map[string]string) *Proxy {
	t.Helper()
	return s.connect(t, cert, flavor, address, true, nil, reject)
}

func (s Server) connect(t *testing.T, cert tls.Certificate, flavor, address string, all bool, eds []string, reject map[string]string) *Proxy {
	t.Helper()
	conn := s.dial(t, cert, nil)
	ctx, cancel := context.WithCancel(context.Background())
	closeConn := func() {
		cancel()
		conn.Close()
	}
	t.Cleanup(closeConn)
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatal(err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	md, _ := structpb.NewStruct(map[string]any{"osm.flavor": flavor, "osm.advertiseAddress": address})
	p := &Proxy{cn: leaf.Subject.CommonName, stream: stream, resp: make(chan *discovery.DiscoveryResponse, 16), close: closeConn}
	// Send returns io.EOF once the server has ended the stream (a proxy it
	// refuses); the stream's status is Recv's to report, so the receiving
	// goroutine below closes Responses and the test sees the end there.
	sendErr := stream.Send(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: p.cn, Metadata: md}, TypeUrl: resource.EndpointType, ResourceNames: eds})
	if sendErr != nil && !errors.Is(sendErr, io.EOF) {
		t.Fatal(sendErr)
	}
	names := func(typeURL string) []string {
		if !all || typeURL == resource.EndpointType {
			return eds
		}
		return nil
	}
	if all && sendErr == nil {
		for _, typ := range []string{resource.ClusterType, resource.ListenerType, resource.RouteType, resource.SecretType} {
			if err := stream.Send(&discovery.DiscoveryRequest{TypeUrl: typ}); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatal(err)
			}
		}
	}
	go func() {
		defer close(p.resp)
		for {
			r, err := stream.Recv()
			if err != nil {
				return
			}
			req := &discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce(), ResourceNames: names(r.GetTypeUrl())}
			if msg, ok := reject[r.GetTypeUrl()]; ok {
				req.VersionInfo, req.ErrorDetail = "", &rpcstatus.Status{Code: int32(codes.InvalidArgument), Message: msg}
			}
			_ = stream.Send(req)
			select {
			case p.resp <- r:
			case <-ctx.Done():
				return
			}
		}
	}()
	return p
}

// WaitXDS waits until the server's xDS listener accepts connections.
// osm-server opens xDS only after every
// provider has sent its first list (and /readyz can say ready a moment
// before), so a proxy that dials as soon as the API answers may be refused.
func (s Server) WaitXDS(t *testing.T) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("osm-server's xDS listener %s to accept connections", s.XDS), func() (bool, string) {
		c, err := net.DialTimeout("tcp", s.XDS, time.Second)
		if err != nil {
			return false, err.Error()
		}
		c.Close()
		return true, ""
	})
}

// dial waits for the xDS listener and returns a client of it that
// authenticates with cert and trusts the server's CA, keeping its TLS
// sessions in sessions (nil: none).
func (s Server) dial(t *testing.T, cert tls.Certificate, sessions tls.ClientSessionCache) *grpc.ClientConn {
	t.Helper()
	s.WaitXDS(t)
	_, _, ca := s.admin(t)
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	creds := credentials.NewTLS(&tls.Config{Certificates: []tls.Certificate{cert}, RootCAs: pool, ServerName: "localhost", MinVersion: tls.VersionTLS13, ClientSessionCache: sessions})
	conn, err := grpc.NewClient(s.XDS, grpc.WithTransportCredentials(creds))
	if err != nil {
		t.Fatal(err)
	}
	return conn
}

// Resumes opens one connection of the proxy with cert, keeping its TLS
// sessions in sessions as Envoy keeps one per cluster, opens its ADS
// stream, waits for the first answer and reports whether the handshake
// resumed a session. The stream's answer may be a refusal: resumption is a
// property of the connection.
func (s Server) Resumes(t *testing.T, cert tls.Certificate, sessions tls.ClientSessionCache) bool {
	t.Helper()
	conn := s.dial(t, cert, sessions)
	defer conn.Close()
	ctx, cancel := context.WithTimeout(t.Context(), testwait.Bound(t))
	defer cancel()
	stream, err := discovery.NewAggregatedDiscoveryServiceClient(conn).StreamAggregatedResources(ctx)
	if err != nil {
		t.Fatalf("ADS stream: %v", err)
	}
	leaf, _ := x509.ParseCertificate(cert.Certificate[0])
	_ = stream.Send(&discovery.DiscoveryRequest{Node: &corev3.Node{Id: leaf.Subject.CommonName}, TypeUrl: resource.ClusterType})
	_, err = stream.Recv()
	p, ok := peer.FromContext(stream.Context())
	if !ok {
		t.Fatalf("no connection to %s: %v", s.XDS, err)
	}
	info, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok {
		t.Fatalf("connection to %s has no TLS state (%T)", s.XDS, p.AuthInfo)
	}
	return info.State.DidResume
}

// WaitEDS waits until the EDS resource name holds exactly want (sorted
// "ip:port" strings).
func (p *Proxy) WaitEDS(t *testing.T, name string, want []string) {
	t.Helper()
	slices.Sort(want)
	var last []string
	bound := testwait.Bound(t)
	deadline := time.After(bound)
	for {
		select {
		case r, ok := <-p.resp:
			if !ok {
				t.Fatalf("proxy %s: ADS stream closed while waiting for EDS %s = %v", p.cn, name, want)
			}
			for _, a := range r.GetResources() {
				var cla endpointv3.ClusterLoadAssignment
				if a.UnmarshalTo(&cla) != nil || cla.GetClusterName() != name {
					continue
				}
				last = last[:0]
				for _, l := range cla.GetEndpoints() {
					for _, e := range l.GetLbEndpoints() {
						sa := e.GetEndpoint().GetAddress().GetSocketAddress()
						last = append(last, fmt.Sprintf("%s:%d", sa.GetAddress(), sa.GetPortValue()))
					}
				}
				slices.Sort(last)
				if slices.Equal(last, want) {
					return
				}
			}
		case <-deadline:
			t.Fatalf("proxy %s: EDS %s = %v after %v, want %v", p.cn, name, last, bound.Round(time.Millisecond), want)
		}
	}
}

func pemDecode(b []byte) ([]byte, bool) {
	blk, _ := pem.Decode(b)
	if blk == nil {
		return nil, false
	}
	return blk.Bytes, true
}

// Responses is the stream's responses, closed when the stream ends.
func (p *Proxy) Responses() <-chan *discovery.DiscoveryResponse { return p.resp }
