package meshclient

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// ErrNotControlPlane is returned when a server's certificate chains to the
// mesh CA but does not carry the control plane's identity.
var ErrNotControlPlane = errors.New("not the mesh's control plane")

// VerifyControlPlane checks that server, a certificate already verified
// against the mesh CA, carries the control plane's identity
// (mesh.ControlPlaneSPIFFEID) of the trust domain of client, the machine's
// own proxy certificate. The mesh CA also signs every machine's
// certificates, and a service's may authenticate a server: only this
// identity sets osm-server's apart.
func VerifyControlPlane(server, client *x509.Certificate) error {
	td, err := trustDomainOf(client)
	if err != nil {
		return err
	}
	want := mesh.ControlPlaneSPIFFEID(td)
	for _, u := range server.URIs {
		if u.String() == want {
			return nil
		}
	}
	return fmt.Errorf("%w: the server's certificate %q does not carry the identity %s (it is another certificate of the mesh, or the server is an osm-server older than this agent: upgrade the servers first)",
		ErrNotControlPlane, server.Subject.CommonName, want)
}

// verifyControlPlane returns a tls.Config.VerifyConnection that runs
// VerifyControlPlane with client's leaf, after crypto/tls verified the
// chain and the host name.
func verifyControlPlane(client tls.Certificate) (func(tls.ConnectionState) error, error) {
	leaf := client.Leaf
	if leaf == nil {
		if len(client.Certificate) == 0 {
			return nil, errors.New("no proxy certificate")
		}
		var err error
		if leaf, err = x509.ParseCertificate(client.Certificate[0]); err != nil {
			return nil, fmt.Errorf("proxy certificate: %w", err)
		}
	}
	if _, err := trustDomainOf(leaf); err != nil {
		return nil, err
	}
	return func(cs tls.ConnectionState) error {
		if len(cs.PeerCertificates) == 0 {
			return fmt.Errorf("%w: the server sent no certificate", ErrNotControlPlane)
		}
		return VerifyControlPlane(cs.PeerCertificates[0], leaf)
	}, nil
}

func trustDomainOf(c *x509.Certificate) (string, error) {
	for _, u := range c.URIs {
		if u.Scheme == "spiffe" {
			return mesh.TrustDomain(u.String())
		}
	}
	return "", fmt.Errorf("certificate %q has no SPIFFE ID to take the mesh's trust domain from", c.Subject.CommonName)
}
