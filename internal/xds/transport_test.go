package xds

import (
	"bytes"
	"context"
	"crypto/tls"
	"encoding/binary"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// h2Proxy is a proxy speaking HTTP/2 frames itself, to see the frames the
// server sends that a gRPC client would handle silently (PINGs, SETTINGS).
type h2Proxy struct {
	t    *testing.T
	conn *tls.Conn
	fr   *http2.Framer
	data bytes.Buffer // stream 1's DATA not yet parsed into messages
}

func dialH2(t *testing.T, e *env, cert tls.Certificate) *h2Proxy {
	t.Helper()
	conn, err := tls.Dial("tcp", e.addr, &tls.Config{
		Certificates: []tls.Certificate{cert}, RootCAs: e.certs.CertPool(), ServerName: "localhost",
		MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"},
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	if err := conn.SetDeadline(time.Now().Add(20 * time.Second)); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(conn, http2.ClientPreface); err != nil {
		t.Fatal(err)
	}
	p := &h2Proxy{t: t, conn: conn, fr: http2.NewFramer(conn, conn)}
	p.fr.ReadMetaHeaders = hpack.NewDecoder(4096, nil)
	if err := p.fr.WriteSettings(); err != nil {
		t.Fatal(err)
	}
	var hb bytes.Buffer
	enc := hpack.NewEncoder(&hb)
	for _, f := range [][2]string{
		{":method", "POST"}, {":scheme", "https"}, {":authority", "localhost"},
		{":path", "/envoy.service.discovery.v3.AggregatedDiscoveryService/StreamAggregatedResources"},
		{"content-type", "application/grpc"}, {"te", "trailers"},
	} {
		if err := enc.WriteField(hpack.HeaderField{Name: f[0], Value: f[1]}); err != nil {
			t.Fatal(err)
		}
	}
	if err := p.fr.WriteHeaders(http2.HeadersFrameParam{StreamID: 1, BlockFragment: hb.Bytes(), EndHeaders: true}); err != nil {
		t.Fatal(err)
	}
	return p
}

// send writes req as one gRPC message in one DATA frame of stream 1.
func (p *h2Proxy) send(req *discovery.DiscoveryRequest) {
	p.t.Helper()
	b, err := proto.Marshal(req)
	if err != nil {
		p.t.Fatal(err)
	}
	msg := make([]byte, 5+len(b))
	binary.BigEndian.PutUint32(msg[1:], uint32(len(b)))
	copy(msg[5:], b)
	if err := p.fr.WriteData(1, false, msg); err != nil {
		p.t.Fatal(err)
	}
}

// frames is what the server sent while the proxy waited for a response.
type frames struct {
	pings    int             // PINGs that are not ACKs
	settings []http2.Setting // from the server's SETTINGS frames
	resp     *discovery.DiscoveryResponse
}

// recv reads frames until a whole DiscoveryResponse has arrived on stream
// 1, answering SETTINGS and PINGs as a client must.
func (p *h2Proxy) recv() frames {
	p.t.Helper()
	var got frames
	for {
		if p.data.Len() >= 5 {
			n := int(binary.BigEndian.Uint32(p.data.Bytes()[1:5]))
			if p.data.Len() >= 5+n {
				msg := p.data.Next(5 + n)[5:]
				got.resp = &discovery.DiscoveryResponse{}
				if err := proto.Unmarshal(msg, got.resp); err != nil {
					p.t.Fatal(err)
				}
				return got
			}
		}
		f, err := p.fr.ReadFrame()
		if err != nil {
			p.t.Fatalf("read frame: %v", err)
		}
		switch f := f.(type) {
		case *http2.SettingsFrame:
			if f.IsAck() {
				continue
			}
			if err := f.ForeachSetting(func(s http2.Setting) error { got.settings = append(got.settings, s); return nil }); err != nil {
				p.t.Fatal(err)
			}
			if err := p.fr.WriteSettingsAck(); err != nil {
				p.t.Fatal(err)
			}
		case *http2.PingFrame:
			if f.IsAck() {
				continue
			}
			got.pings++
			if err := p.fr.WritePing(true, f.Data); err != nil {
				p.t.Fatal(err)
			}
		case *http2.DataFrame:
			p.data.Write(f.Data())
			// Give the flow-control credit back, as gRPC clients do.
			if n := uint32(len(f.Data())); n > 0 {
				if err := errors.Join(p.fr.WriteWindowUpdate(0, n), p.fr.WriteWindowUpdate(1, n)); err != nil {
					p.t.Fatal(err)
				}
			}
		case *http2.MetaHeadersFrame:
			if f.StreamEnded() {
				p.t.Fatalf("stream ended: %v", f.Fields)
			}
		case *http2.GoAwayFrame, *http2.RSTStreamFrame:
			p.t.Fatalf("server ended the connection or stream: %v", f)
		}
	}
}

// Every ACK a proxy sends is a DATA frame. With gRPC's dynamic flow
// control the server answered each with a WINDOW_UPDATE and a PING of its
// own (bandwidth-delay estimation) and read the PING's ACK: three frames,
// two TLS records and a wake-up per ACK, at 10,000 proxies per push. The
// server's windows are fixed, so it sends no PING, and it keeps no HPACK
// table for headers it decodes once.
func TestServerSendsNoPingPerRequest(t *testing.T) {
	e := startEnv(t)
	cert := e.enroll(t, "bookbuyer")
	p := dialH2(t, e, cert)
	p.send(&discovery.DiscoveryRequest{Node: envoyNode(cnOf(t, cert), "10.0.0.10"), TypeUrl: resource.ClusterType})
	var pings int
	var settings []http2.Setting
	for i := range 2 { // CDS and LDS
		got := p.recv()
		pings += got.pings
		settings = append(settings, got.settings...)
		r := got.resp
		if r.GetVersionInfo() == "" {
			t.Fatalf("response %d (%s) has no version", i, r.GetTypeUrl())
		}
		// ACK, and subscribe to listeners after the first response.
		p.send(&discovery.DiscoveryRequest{TypeUrl: r.GetTypeUrl(), VersionInfo: r.GetVersionInfo(), ResponseNonce: r.GetNonce()})
		if i == 0 {
			p.send(&discovery.DiscoveryRequest{TypeUrl: resource.ListenerType})
		}
	}
	if pings != 0 {
		t.Errorf("server sent %d PINGs while the proxy sent 4 requests; want none (flow-control windows fixed, no BDP pings)", pings)
	}
	table := -1
	for _, s := range settings {
		if s.ID == http2.SettingHeaderTableSize {
			table = int(s.Val)
		}
	}
	if table != 0 {
		t.Errorf("server's SETTINGS_HEADER_TABLE_SIZE = %d (-1: not sent), want 0", table)
	}
}

// TestHandshakeTimeout: a connection to the xDS port that sends nothing, or
// stops in the middle of its ClientHello, is closed by the server once the
// handshake timeout has passed, not held for gRPC's default 120 s.
func TestHandshakeTimeout(t *testing.T) {
	e := startEnv(t)
	const bound = 300 * time.Millisecond
	srv := NewServer(discard(), cache.New(discard()), e.certs, Options{HandshakeTimeout: bound})
	addr, _ := serveXDS(t, e, srv)
	for _, tc := range []struct {
		name string
		send []byte
	}{
		{"nothing", nil},
		// A TLS handshake record header announcing 512 bytes, and the
		// first bytes of a ClientHello.
		{"a partial ClientHello", []byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}},
		// A proxy's TLS handshake, then no HTTP/2 preface.
		{"no HTTP/2 preface after TLS", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			start := time.Now()
			var c net.Conn
			var err error
			if tc.name == "no HTTP/2 preface after TLS" {
				c, err = tls.Dial("tcp", addr, &tls.Config{Certificates: []tls.Certificate{e.enroll(t, "bookbuyer")}, RootCAs: e.certs.CertPool(), ServerName: "localhost", MinVersion: tls.VersionTLS13, NextProtos: []string{"h2"}})
			} else {
				c, err = net.Dial("tcp", addr)
			}
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			if _, err := c.Write(tc.send); err != nil {
				t.Fatal(err)
			}
			// Wait for the server to close it; the deadline only ends a test that fails.
			c.SetReadDeadline(time.Now().Add(5 * time.Second))
			_, err = io.Copy(io.Discard, c)
			took := time.Since(start)
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				t.Fatalf("connection still open after %v; want it closed after the %v handshake timeout", took, bound)
			}
			t.Logf("closed after %v (err %v)", took, err)
			if took < bound-50*time.Millisecond {
				t.Errorf("closed after %v, before the %v handshake timeout", took, bound)
			}
		})
	}
	// A peer that never stays silent for the timeout, but sends its
	// ClientHello a byte at a time, is closed once the whole handshake
	// has taken wholeHandshake of it.
	t.Run("a ClientHello a byte at a time", func(t *testing.T) {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		closed := make(chan struct{})
		go func() {
			defer close(closed)
			c.SetReadDeadline(time.Now().Add(time.Minute)) // only ends a test that fails
			io.Copy(io.Discard, c)
		}()
		// More bytes than the whole-handshake bound lets through: the
		// server must close the connection while they are still coming.
		hello := append([]byte{0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03}, make([]byte, 500)...)
		stillSending := true
		tick := time.NewTicker(bound / 3)
		defer tick.Stop()
	trickle:
		for _, b := range hello {
			select {
			case <-closed:
				break trickle
			case <-tick.C:
				c.Write([]byte{b})
			}
		}
		select {
		case <-closed:
		default:
			stillSending = false
			<-closed
		}
		took := time.Since(start)
		if whole := wholeHandshake(bound); took < whole-50*time.Millisecond || !stillSending {
			t.Errorf("closed after %v (while the peer was still sending: %v); want it closed after the whole-handshake bound %v, while the peer still sends", took, stillSending, whole)
		}
	})
}

// serveXDS runs srv.Serve on a free loopback port with the env's serving
// certificate until the test ends or stop is called; stop returns Serve's
// error.
func serveXDS(t *testing.T, e *env, srv *Server) (addr string, stop func() error) {
	t.Helper()
	tlsCfg := &tls.Config{
		MinVersion:     tls.VersionTLS13,
		GetCertificate: e.certs.ServingCertificate([]string{"localhost", "127.0.0.1"}),
		ClientAuth:     tls.RequireAndVerifyClientCert,
		ClientCAs:      e.certs.CertPool(),
	}
	ctx, cancel := context.WithCancel(t.Context())
	ready := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ctx, "127.0.0.1:0", tlsCfg, ready) }()
	stop = sync.OnceValue(func() error { cancel(); return <-done })
	t.Cleanup(func() {
		if err := stop(); err != nil {
			t.Error(err)
		}
	})
	select {
	case a := <-ready:
		return a.String(), stop
	case err := <-done:
		t.Fatalf("xDS server did not start: %v", err)
		return "", nil
	}
}
