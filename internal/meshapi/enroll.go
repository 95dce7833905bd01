package meshapi

import (
	"crypto/ecdsa"
	"crypto/ed25519"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/sha256"
	"crypto/x509"
	"encoding/hex"
	"fmt"
	"strings"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// EnrollRequest is the body of POST /api/v1/enroll.
type EnrollRequest struct {
	Token string `json:"token"`
	// Service is the service the machine joins; it must be the one the
	// token is bound to.
	Service mesh.MeshService `json:"service"`
	// CSR is a PEM "CERTIFICATE REQUEST". Its subject and SANs are
	// ignored: the server decides the identity.
	CSR string `json:"csr"`
}

// RenewRequest is the body of POST /api/v1/renew.
type RenewRequest struct {
	CSR string `json:"csr"`
}

// CertificateResponse is the body of a successful enrollment or renewal.
type CertificateResponse struct {
	// Identity is the proxy certificate's CN, <uuid>.<service>.<namespace>.
	Identity string `json:"identity"`
	// Certificate is the proxy certificate, PEM.
	Certificate string `json:"certificate"`
	// CA is the mesh CA bundle, PEM.
	CA string `json:"ca"`
	// XDSAddress is the host:port of the xDS server.
	XDSAddress string `json:"xdsAddress"`
	// Replicas are the mesh's osm-server replicas (empty: the server
	// knows none), as in AgentConfig.
	Replicas []Replica `json:"replicas,omitempty"`
}

// GenerateKey returns a new proxy key of the kind osm-agent uses, ECDSA
// P-256, which [CheckKey] accepts.
func GenerateKey() (*ecdsa.PrivateKey, error) {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, fmt.Errorf("generate proxy key: %w", err)
	}
	return k, nil
}

// CheckKey is the key policy of a proxy CSR, the only place it is
// written: it accepts ECDSA P-256 and P-384 and RSA of 2048 bits or more.
// The server refuses other CSRs (the enrollment handler with 400 WeakKey,
// internal/certificate with ErrInvalidCSR); the client checks before it
// sends one.
func CheckKey(pub any) error {
	const use = "generate an ECDSA P-256 key (osm-agent does)"
	switch k := pub.(type) {
	case *ecdsa.PublicKey:
		if k.Curve == elliptic.P256() || k.Curve == elliptic.P384() {
			return nil
		}
		return fmt.Errorf("ECDSA curve %s is not accepted (P-256 or P-384): %s", k.Curve.Params().Name, use)
	case *rsa.PublicKey:
		if k.N.BitLen() >= 2048 {
			return nil
		}
		return fmt.Errorf("RSA key of %d bits is too weak (2048 or more): %s", k.N.BitLen(), use)
	}
	kind := fmt.Sprintf("%T", pub)
	if _, ok := pub.(ed25519.PublicKey); ok {
		kind = x509.Ed25519.String()
	}
	return fmt.Errorf("key type %s is not accepted (ECDSA P-256 or P-384, or RSA of 2048 bits or more): %s", kind, use)
}

// CAHash returns "sha256:" and the hex SHA-256 of the certificate's
// SubjectPublicKeyInfo, the pin of --ca-cert-hash (as kubeadm's
// --discovery-token-ca-cert-hash). An agent pins the server by comparing
// it with the hash of a CA the server presents. It returns "" for DER that
// does not parse, which matches no pin.
func CAHash(caDER []byte) string {
	cert, err := x509.ParseCertificate(caDER)
	if err != nil {
		return ""
	}
	sum := sha256.Sum256(cert.RawSubjectPublicKeyInfo)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ParseCAHash checks a --ca-cert-hash value and returns it in the form
// CAHash returns.
func ParseCAHash(s string) (string, error) {
	h, ok := strings.CutPrefix(strings.ToLower(strings.TrimSpace(s)), "sha256:")
	if !ok {
		return "", fmt.Errorf("--ca-cert-hash %q: want sha256:<64 hex digits> as printed by `osm-server token create`", s)
	}
	if b, err := hex.DecodeString(h); err != nil || len(b) != sha256.Size {
		return "", fmt.Errorf("--ca-cert-hash %q: want sha256:<64 hex digits> as printed by `osm-server token create`", s)
	}
	return "sha256:" + h, nil
}

// JoinCommand returns the command an operator pastes on a machine to
// enroll it with a token.
func JoinCommand(serverURL, secret, caHash string, svc mesh.MeshService) string {
	return fmt.Sprintf("osm-agent enroll --server %s --token %s --ca-cert-hash %s --service %s --namespace %s",
		serverURL, secret, caHash, svc.Name, svc.Namespace)
}
