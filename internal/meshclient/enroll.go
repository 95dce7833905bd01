package meshclient

import (
	"bytes"
	"context"
	"crypto"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// ErrCAHashMismatch: the server's TLS chain holds no CA with the pinned
// hash, so the agent refused it before sending anything.
var ErrCAHashMismatch = errors.New("server not trusted: no CA in its TLS chain matches --ca-cert-hash")

// JoinRequest says where and how to enroll.
type JoinRequest struct {
	// Server is the server's base URL, https://host:port.
	Server string
	// Token is the join token's secret.
	Token string
	// CACertHash pins the mesh root: "sha256:<hex>" as printed by
	// `osm-server token create`.
	CACertHash string
	// Service is the service this machine runs; it must be the one the
	// token is bound to.
	Service mesh.MeshService
}

// Result is a proxy certificate as issued.
type Result struct {
	// CertificatePEM is the proxy certificate.
	CertificatePEM []byte
	// CAPEM is the mesh CA bundle; it contains the pinned root.
	CAPEM []byte
	// XDSAddress is the host:port of the xDS server.
	XDSAddress string
	// Identity is the certificate's CN, <uuid>.<service>.<namespace>.
	Identity string
	// Replicas are the mesh's osm-server replicas the server listed.
	Replicas []meshapi.Replica
}

// defaultTimeout bounds one enrollment or renewal when the caller's
// http.Client sets none.
const defaultTimeout = 30 * time.Second

// Enroll sends a CSR for key with the join token and returns the issued
// certificate. The server is trusted only if its TLS chain contains a CA
// whose [meshapi.CAHash] is req.CACertHash and that CA verifies the server's
// certificate for the URL's host; this is checked during the handshake,
// before the token is sent. hc may be nil; its Transport, if set, must be
// an *http.Transport (its TLS settings are replaced by the pin).
func Enroll(ctx context.Context, hc *http.Client, req JoinRequest, key crypto.Signer) (Result, error) {
	pin, err := meshapi.ParseCAHash(req.CACertHash)
	if err != nil {
		return Result{}, err
	}
	u, err := parseServer(req.Server)
	if err != nil {
		return Result{}, err
	}
	if req.Token == "" {
		return Result{}, errors.New("join token is empty: pass --token from `osm-server token create`")
	}
	if err := req.Service.Validate(); err != nil {
		return Result{}, fmt.Errorf("service: %w", err)
	}
	csrPEM, err := makeCSR(key)
	if err != nil {
		return Result{}, err
	}
	client, closeIdle, err := pinnedClient(hc, pinnedTLS(pin, u.Hostname()))
	if err != nil {
		return Result{}, err
	}
	defer closeIdle()

	var resp meshapi.CertificateResponse
	body := meshapi.EnrollRequest{Token: req.Token, Service: req.Service, CSR: string(csrPEM)}
	if err := post(ctx, client, u.JoinPath("/api/v1/enroll"), body, &resp); err != nil {
		return Result{}, fmt.Errorf("enroll with %s: %w", u.Redacted(), err)
	}
	res, err := checkResponse(resp, key, req.Service)
	if err != nil {
		return Result{}, fmt.Errorf("enroll with %s: %w", u.Redacted(), err)
	}
	if !bundleHas(res.CAPEM, pin) {
		return Result{}, fmt.Errorf("enroll with %s: the CA bundle in the answer does not contain the pinned CA %s", u.Redacted(), pin)
	}
	return res, nil
}

// Renew sends a CSR for key to the server over mTLS, authenticated by
// cert, the current proxy certificate, and returns the new certificate
// for the same identity. The server must have a certificate issued by a CA
// in caPEM. key may be cert's key or a new one.
func Renew(ctx context.Context, server string, caPEM []byte, cert tls.Certificate, key crypto.Signer) (Result, error) {
	u, err := parseServer(server)
	if err != nil {
		return Result{}, err
	}
	pool := x509.NewCertPool()
	if !pool.AppendCertsFromPEM(caPEM) {
		return Result{}, errors.New("renew: the CA bundle has no PEM certificate (ca.crt in the data directory)")
	}
	if len(cert.Certificate) == 0 {
		return Result{}, errors.New("renew: the current proxy certificate is empty")
	}
	current, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return Result{}, fmt.Errorf("renew: current proxy certificate: %w", err)
	}
	id, err := mesh.ParseProxyIdentity(current.Subject.CommonName)
	if err != nil {
		return Result{}, fmt.Errorf("renew: current certificate: %w", err)
	}
	csrPEM, err := makeCSR(key)
	if err != nil {
		return Result{}, err
	}
	verify, err := verifyControlPlane(cert)
	if err != nil {
		return Result{}, fmt.Errorf("renew: %w", err)
	}
	client, closeIdle, err := pinnedClient(nil, &tls.Config{
		MinVersion:       tls.VersionTLS12,
		RootCAs:          pool,
		Certificates:     []tls.Certificate{cert},
		VerifyConnection: verify,
	})
	if err != nil {
		return Result{}, err
	}
	defer closeIdle()

	var resp meshapi.CertificateResponse
	if err := post(ctx, client, u.JoinPath("/api/v1/renew"), meshapi.RenewRequest{CSR: string(csrPEM)}, &resp); err != nil {
		return Result{}, fmt.Errorf("renew %s with %s: %w", id, u.Redacted(), err)
	}
	res, err := checkResponse(resp, key, id.Service)
	if err != nil {
		return Result{}, fmt.Errorf("renew %s with %s: %w", id, u.Redacted(), err)
	}
	if res.Identity != id.CommonName() {
		return Result{}, fmt.Errorf("renew %s with %s: the server returned a certificate for %s", id, u.Redacted(), res.Identity)
	}
	return res, nil
}

func parseServer(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" {
		return nil, fmt.Errorf("--server %q: want https://host:port (the osm-server API address)", s)
	}
	return u, nil
}

// pinnedTLS trusts a server whose chain contains the CA with the pin and
// whose leaf that CA verifies for host.
func pinnedTLS(pin, host string) *tls.Config {
	return &tls.Config{
		MinVersion: tls.VersionTLS12,
		// The chain is verified in VerifyConnection against the pinned CA
		// found in it; there is no trust store to verify it against before.
		InsecureSkipVerify: true, //nolint:gosec // verified below
		VerifyConnection: func(cs tls.ConnectionState) error {
			return verifyPinned(cs.PeerCertificates, pin, host)
		},
	}
}

func verifyPinned(chain []*x509.Certificate, pin, host string) error {
	if len(chain) == 0 {
		return fmt.Errorf("%w: the server sent no certificate", ErrCAHashMismatch)
	}
	var root *x509.Certificate
	intermediates := x509.NewCertPool()
	var seen []string
	for _, c := range chain[1:] {
		h := meshapi.CAHash(c.Raw)
		if h == pin && c.BasicConstraintsValid && c.IsCA {
			root = c
			continue
		}
		intermediates.AddCert(c)
		seen = append(seen, fmt.Sprintf("%q %s", c.Subject.CommonName, h))
	}
	if root == nil {
		if len(seen) == 0 {
			return fmt.Errorf("%w %s: the server sent only its own certificate %q; it must present its full chain including the mesh root", ErrCAHashMismatch, pin, chain[0].Subject.CommonName)
		}
		return fmt.Errorf("%w %s: the server's chain has %s; check the hash printed by `osm-server token create`", ErrCAHashMismatch, pin, strings.Join(seen, ", "))
	}
	roots := x509.NewCertPool()
	roots.AddCert(root)
	_, err := chain[0].Verify(x509.VerifyOptions{
		DNSName:       host,
		Roots:         roots,
		Intermediates: intermediates,
		KeyUsages:     []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
	if err != nil {
		return fmt.Errorf("server certificate %q is not valid for %s under the pinned CA: %w", chain[0].Subject.CommonName, host, err)
	}
	return nil
}

// pinnedClient returns a copy of hc (or a new client) whose transport uses
// cfg and which never follows redirects, and a func closing its idle
// connections.
func pinnedClient(hc *http.Client, cfg *tls.Config) (*http.Client, func(), error) {
	c := &http.Client{Timeout: defaultTimeout}
	if hc != nil {
		cp := *hc
		c = &cp
	}
	var tr *http.Transport
	switch t := c.Transport.(type) {
	case nil:
		tr = http.DefaultTransport.(*http.Transport).Clone()
	case *http.Transport:
		tr = t.Clone()
	default:
		return nil, nil, fmt.Errorf("enroll: the http.Client's Transport is a %T; it must be an *http.Transport so the server can be pinned", t)
	}
	tr.TLSClientConfig = cfg
	c.Transport = tr
	c.CheckRedirect = func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
	return c, tr.CloseIdleConnections, nil
}

func post(ctx context.Context, c *http.Client, u *url.URL, in, out any) error {
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encode request: %w", err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, u.String(), bytes.NewReader(b))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/json")
	return roundTrip(c, req, out)
}

func makeCSR(key crypto.Signer) ([]byte, error) {
	if key == nil {
		return nil, errors.New("make CSR: no private key")
	}
	if err := meshapi.CheckKey(key.Public()); err != nil {
		return nil, fmt.Errorf("make CSR: %w", err)
	}
	der, err := x509.CreateCertificateRequest(rand.Reader, &x509.CertificateRequest{}, key)
	if err != nil {
		return nil, fmt.Errorf("make CSR: %w", err)
	}
	return pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE REQUEST", Bytes: der}), nil
}

// checkResponse checks that the certificate is for key and a proxy of svc,
// and that the CA bundle verifies it.
func checkResponse(resp meshapi.CertificateResponse, key crypto.Signer, svc mesh.MeshService) (Result, error) {
	cert, err := meshapi.ParseCertificatePEM([]byte(resp.Certificate))
	if err != nil {
		return Result{}, fmt.Errorf("certificate in the answer: %w", err)
	}
	type equaler interface{ Equal(x crypto.PublicKey) bool }
	if k, ok := key.Public().(equaler); !ok || !k.Equal(cert.PublicKey) {
		return Result{}, errors.New("the certificate in the answer is not for this machine's key")
	}
	if cert.Subject.CommonName != resp.Identity {
		return Result{}, fmt.Errorf("the certificate in the answer is for %q, the answer says %q", cert.Subject.CommonName, resp.Identity)
	}
	id, err := mesh.ParseProxyIdentity(resp.Identity)
	if err != nil {
		return Result{}, fmt.Errorf("the certificate in the answer: %w", err)
	}
	if id.Service != svc {
		return Result{}, fmt.Errorf("the certificate in the answer is for service %s, want %s", id.Service, svc)
	}
	switch err := meshapi.VerifyChain(cert, []byte(resp.CA)); {
	case errors.Is(err, meshapi.ErrNoCA):
		return Result{}, errors.New("the answer has no CA bundle")
	case err != nil:
		return Result{}, fmt.Errorf("the certificate in the answer does not verify against its CA bundle: %w", err)
	}
	return Result{CertificatePEM: []byte(resp.Certificate), CAPEM: []byte(resp.CA), XDSAddress: resp.XDSAddress, Identity: resp.Identity, Replicas: resp.Replicas}, nil
}

// bundleHas reports whether the PEM bundle holds a certificate with the pin.
func bundleHas(bundle []byte, pin string) bool {
	for rest := bundle; ; {
		var block *pem.Block
		block, rest = pem.Decode(rest)
		if block == nil {
			return false
		}
		if block.Type == "CERTIFICATE" && meshapi.CAHash(block.Bytes) == pin {
			return true
		}
	}
}
