// Command bookthief is the demo's intruder, a proxyless gRPC client that
// no TrafficTarget allows into bookstore. In a loop it tries two ways:
//
//   - through the mesh, xds:///bookstore.default.mesh:14001: the xDS
//     server sends bookthief no route to bookstore, so the call fails;
//   - straight to bookstore-v1's address (-direct) over TLS with its own
//     mesh service certificate: the handshake succeeds, and bookstore's
//     xDS-enabled server refuses the call by RBAC (PERMISSION_DENIED).
//
// Every failure counts as refused, every success as stolen; the counts go
// to stdout as JSON lines.
package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/status"

	"github.com/osm-vm/osm-vm/examples/bookstore/bookapi"
)

func main() { bookapi.Main("bookthief", run) }

func run(ctx context.Context, args []string) error {
	fs := flag.NewFlagSet("bookthief", flag.ContinueOnError)
	interval := fs.Duration("interval", 200*time.Millisecond, "time between attempts")
	direct := fs.String("direct", "127.0.10.3:14001", "bookstore address to dial directly")
	certDir := fs.String("cert-dir", "", "directory with the agent's service.crt, service.key and service-ca.crt (required)")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *certDir == "" {
		return errors.New("-cert-dir is required: the osm-agent data directory of this machine")
	}
	mesh, err := bookapi.DialMesh(bookapi.BookstoreTarget)
	if err != nil {
		return err
	}
	defer mesh.Close()
	creds, err := serviceTLS(*certDir)
	if err != nil {
		return err
	}
	dconn, err := grpc.NewClient("passthrough:///"+*direct, grpc.WithTransportCredentials(creds))
	if err != nil {
		return fmt.Errorf("dial %s: %w", *direct, err)
	}
	defer dconn.Close()

	var (
		counts  bookapi.Counters
		lastErr bookapi.LastError
		wg      sync.WaitGroup
	)
	rctx, cancel := context.WithCancel(ctx)
	wg.Go(func() { bookapi.Report(rctx, os.Stdout, "bookthief", &counts, lastErr.Get, 500*time.Millisecond) })
	defer func() { cancel(); wg.Wait() }()

	seen := map[string]bool{} // each kind of refusal is logged once
	t := time.NewTicker(*interval)
	defer t.Stop()
	for {
		for _, try := range []struct {
			name string
			conn grpc.ClientConnInterface
		}{{"Mesh", mesh}, {"Direct", dconn}} {
			cctx, ccancel := context.WithTimeout(ctx, time.Second)
			_, err := bookapi.Call(cctx, try.conn, bookapi.BuyBookMethod, "stolen book")
			ccancel()
			switch {
			case ctx.Err() != nil:
				return nil
			case err == nil:
				counts.Add("stolen"+try.name, 1)
			case status.Code(err) == codes.PermissionDenied:
				counts.Add("denied"+try.name, 1)
				lastErr.Set(err)
			default:
				counts.Add("failed"+try.name, 1)
				lastErr.Set(err)
			}
			if key := try.name + status.Code(err).String(); err != nil && !seen[key] {
				seen[key] = true
				fmt.Fprintf(os.Stderr, "bookthief: %s call refused: %v\n", strings.ToLower(try.name), err)
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
	}
}

// serviceTLS is TLS with this machine's service certificate, trusting
// the mesh CA (the server's name is not checked: mesh certificates name
// service accounts, not hosts).
func serviceTLS(dir string) (credentials.TransportCredentials, error) {
	pair, err := tls.LoadX509KeyPair(filepath.Join(dir, "service.crt"), filepath.Join(dir, "service.key"))
	if err != nil {
		return nil, fmt.Errorf("service certificate: %w", err)
	}
	caPEM, err := os.ReadFile(filepath.Join(dir, "service-ca.crt"))
	if err != nil {
		return nil, fmt.Errorf("service CA: %w", err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		return nil, fmt.Errorf("%s holds no PEM certificate", filepath.Join(dir, "service-ca.crt"))
	}
	return credentials.NewTLS(&tls.Config{
		Certificates:       []tls.Certificate{pair},
		MinVersion:         tls.VersionTLS12,
		InsecureSkipVerify: true, // the chain is verified below, against the mesh CA
		VerifyPeerCertificate: func(raw [][]byte, _ [][]*x509.Certificate) error {
			if len(raw) == 0 {
				return errors.New("server sent no certificate")
			}
			leaf, err := x509.ParseCertificate(raw[0])
			if err != nil {
				return err
			}
			inter := x509.NewCertPool()
			for _, r := range raw[1:] {
				if c, err := x509.ParseCertificate(r); err == nil {
					inter.AddCert(c)
				}
			}
			_, err = leaf.Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		},
	}), nil
}
