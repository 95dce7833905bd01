package xds

// Who may hold a stream: the certificate check of the TLS handshake, a new
// stream's proxy authenticated from its TLS peer, the proxy's claim once
// its stream names its node, and a live stream's proxy checked again.

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"log/slog"
	"net"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
)

// Identities is what the server needs from the certificate manager.
type Identities interface {
	// VerifyClient checks a TLS client's certificates (the leaf first)
	// against the mesh CA as crypto/tls's RequireAndVerifyClientCert would,
	// and returns the verified chain, the leaf first.
	VerifyClient(certs []*x509.Certificate) ([]*x509.Certificate, error)
	// VerifyResumedClient is VerifyClient for the certificates a resumed
	// TLS session carries, which a full handshake verified when it made
	// the session: it checks what may have changed since (validity, the
	// CA), not the CA's signature.
	VerifyResumedClient(certs []*x509.Certificate) ([]*x509.Certificate, error)
	// VerifyProxy fails for an unknown or revoked proxy, or a certificate
	// that is no longer its current one.
	// chain is the TLS layer's verified chain, the proxy's certificate first.
	VerifyProxyChain(ctx context.Context, chain []*x509.Certificate) (certificate.ProxyRecord, error)
	// ClaimVerifiedProxy records a connection (unclaimed -> claimed, last
	// seen) from the record VerifyProxyChain returned when it opened.
	ClaimVerifiedProxy(ctx context.Context, rec certificate.ProxyRecord) error
}

// identityCheck is the server's identity check over Identities: every
// stream is bound to the proxy certificate it was opened with, which
// must verify against the mesh CA and belong to a known, unrevoked proxy.
type identityCheck struct {
	ids     Identities
	log     *slog.Logger
	metrics *serverMetrics // counts the handshakes clientTLS accepts
}

// peerProxy is the proxy a new stream was authenticated as.
type peerProxy struct {
	cn    string
	chain []*x509.Certificate     // the verified chain, the proxy's certificate first
	rec   certificate.ProxyRecord // the proxy's record, for its claim
	addr  net.Addr                // the connection's remote address, for the log
}

// authenticate authenticates a new stream from its TLS peer: its
// certificate must verify against the mesh CA, be a proxy certificate,
// and be the current one of a known, unrevoked proxy.
func (c *identityCheck) authenticate(ctx context.Context) (peerProxy, error) {
	p, ok := peer.FromContext(ctx)
	if !ok {
		return peerProxy{}, status.Error(codes.Unauthenticated, "no peer information")
	}
	ti, ok := p.AuthInfo.(credentials.TLSInfo)
	if !ok || len(ti.State.PeerCertificates) == 0 {
		return peerProxy{}, status.Error(codes.Unauthenticated, "no client certificate: connect with the proxy certificate from enrollment")
	}
	// Serve's TLS layer checked the certificate with VerifyClient, which
	// remembers it: asking again costs a hash. A connection whose TLS
	// layer verified it (another gRPC server's) has the chain already.
	var chain []*x509.Certificate
	if len(ti.State.VerifiedChains) > 0 && len(ti.State.VerifiedChains[0]) > 0 {
		chain = ti.State.VerifiedChains[0]
	} else {
		var err error
		if chain, err = c.ids.VerifyClient(ti.State.PeerCertificates); err != nil {
			return peerProxy{}, status.Errorf(codes.Unauthenticated, "%v", err)
		}
	}
	cn := chain[0].Subject.CommonName
	if _, err := mesh.ParseProxyIdentity(cn); err != nil {
		return peerProxy{}, status.Errorf(codes.PermissionDenied, "client certificate is not a proxy certificate: %v", err)
	}
	rec, err := c.ids.VerifyProxyChain(ctx, chain)
	if err != nil {
		c.log.Warn("xDS stream refused", "cn", cn, "peer", p.Addr.String(), "err", err)
		return peerProxy{}, status.Errorf(codes.PermissionDenied, "proxy %s: %v", cn, err)
	}
	return peerProxy{cn: cn, chain: chain, rec: rec, addr: p.Addr}, nil
}

// claim records the connection of the proxy whose record rec is (see
// Identities.ClaimVerifiedProxy), once its stream named its node.
func (c *identityCheck) claim(ctx context.Context, cn string, rec certificate.ProxyRecord) error {
	if err := c.ids.ClaimVerifiedProxy(ctx, rec); err != nil {
		return status.Errorf(codes.PermissionDenied, "proxy %s: %v", cn, err)
	}
	return nil
}

// allowed checks again that the proxy whose verified chain this is may
// hold a stream; the error says why not.
func (c *identityCheck) allowed(ctx context.Context, chain []*x509.Certificate) error {
	_, err := c.ids.VerifyProxyChain(ctx, chain)
	return err
}

// clientTLS returns a copy of tlsCfg that leaves the client's certificate
// chain to Identities.VerifyClient instead of crypto/tls. Both check the
// same things (the chain to the mesh root, validity periods, client
// authentication), but crypto/tls verifies the CA's signature on every
// handshake, which was a tenth of the server's CPU when a fleet
// reconnected at once; VerifyClient does so once per certificate.
// crypto/tls still checks that the client holds the certificate's key,
// and still sends ClientCAs to clients as the acceptable issuers. A
// certificate refused here ends the handshake with a bad_certificate
// alert (crypto/tls's own check would say unknown_ca or
// certificate_expired); the reason is in the error.
func (c *identityCheck) clientTLS(tlsCfg *tls.Config) *tls.Config {
	cfg := tlsCfg.Clone()
	cfg.ClientAuth = tls.RequireAnyClientCert
	next := cfg.VerifyConnection
	cfg.VerifyConnection = func(cs tls.ConnectionState) error {
		verify := c.ids.VerifyClient
		if cs.DidResume {
			// The session's certificates were verified in the handshake
			// that made it (this function, on this server or a replica
			// sharing its ticket keys); only a server with those keys
			// could have made the ticket that carries them.
			verify = c.ids.VerifyResumedClient
		}
		if _, err := verify(cs.PeerCertificates); err != nil {
			return err
		}
		if next != nil {
			if err := next(cs); err != nil {
				return err
			}
		}
		c.metrics.handshake(cs.DidResume)
		return nil
	}
	return cfg
}
