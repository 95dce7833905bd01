package agenttest

import (
	"context"
	"crypto"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net/http"
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// Enroller is a fake enrollment client that signs with a test CA. It
// implements the agent's Enroller interface.
type Enroller struct {
	CA         *CA
	Token      string        // the one valid join token
	XDSAddress string        // returned with every certificate
	Lifetime   time.Duration // of issued certificates (default 1h)
	// Renewed, when set, receives the CN of each renewal.
	Renewed chan string
	// LoseRenewals is how many of the next renewals succeed but whose
	// answer is lost: an error is returned instead. As osm-server does,
	// the certificate such a renewal replaced renews again only for the
	// same key (others are refused 403 RenewalNotCurrent).
	LoseRenewals int

	mu          sync.Mutex
	unreachable bool
	enrolls     int
	renews      int
	// replaced holds, by the serial of a certificate a lost renewal
	// replaced, the key that renewal was for.
	replaced map[string]crypto.PublicKey
	// askedAgain counts the renewals that asked again for a lost one.
	askedAgain int
}

// AskedAgain returns how many renewals asked again, with the certificate
// a lost renewal replaced and that renewal's key, and were answered.
func (e *Enroller) AskedAgain() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.askedAgain
}

// SetUnreachable makes every call fail as if the server were down.
func (e *Enroller) SetUnreachable(down bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.unreachable = down
}

// Calls returns how many enrollments and renewals succeeded.
func (e *Enroller) Calls() (enrolls, renews int) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.enrolls, e.renews
}

var errUnreachable = errors.New("dial tcp 127.0.0.1:15443: connect: connection refused")

func (e *Enroller) lifetime() time.Duration {
	if e.Lifetime > 0 {
		return e.Lifetime
	}
	return time.Hour
}

// Enroll issues a certificate for a new proxy identity of req.Service when
// req.Token is the valid token.
func (e *Enroller) Enroll(ctx context.Context, req meshclient.JoinRequest, key crypto.Signer) (meshclient.Result, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.unreachable {
		return meshclient.Result{}, errUnreachable
	}
	if req.Token != e.Token {
		return meshclient.Result{}, &meshclient.APIError{Status: http.StatusUnauthorized, Body: meshapi.ErrorBody{Reason: meshapi.ReasonTokenUnknown, Error: "join token unknown"}}
	}
	id := mesh.NewProxyIdentity(req.Service)
	certPEM, err := e.CA.Sign(id.CommonName(), key.Public(), e.lifetime())
	if err != nil {
		return meshclient.Result{}, err
	}
	e.enrolls++
	return meshclient.Result{CertificatePEM: certPEM, CAPEM: e.CA.PEM, XDSAddress: e.XDSAddress, Identity: id.CommonName()}, nil
}

// Renew issues a certificate for the identity of cert and the new key.
func (e *Enroller) Renew(ctx context.Context, server string, caPEM []byte, cert tls.Certificate, key crypto.Signer) (meshclient.Result, error) {
	e.mu.Lock()
	if e.unreachable {
		e.mu.Unlock()
		return meshclient.Result{}, errUnreachable
	}
	e.mu.Unlock()
	leaf, err := x509.ParseCertificate(cert.Certificate[0])
	if err != nil {
		return meshclient.Result{}, err
	}
	if _, err := leaf.Verify(x509.VerifyOptions{Roots: e.CA.Pool(), KeyUsages: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}}); err != nil {
		return meshclient.Result{}, &meshclient.APIError{Status: http.StatusUnauthorized, Body: meshapi.ErrorBody{Error: err.Error()}}
	}
	cn := leaf.Subject.CommonName
	serial := leaf.SerialNumber.Text(16)
	e.mu.Lock()
	if want, ok := e.replaced[serial]; ok {
		if k, _ := key.Public().(interface{ Equal(crypto.PublicKey) bool }); k == nil || !k.Equal(want) {
			e.mu.Unlock()
			return meshclient.Result{}, &meshclient.APIError{Status: http.StatusForbidden, Body: meshapi.ErrorBody{Reason: meshapi.ReasonRenewalNotCurrent,
				Error: "certificate " + serial + " was replaced by a renewal: the machine's current certificate must renew"}}
		}
		delete(e.replaced, serial)
		e.askedAgain++
	}
	e.mu.Unlock()
	certPEM, err := e.CA.Sign(cn, key.Public(), e.lifetime())
	if err != nil {
		return meshclient.Result{}, err
	}
	e.mu.Lock()
	if e.LoseRenewals > 0 {
		e.LoseRenewals--
		if e.replaced == nil {
			e.replaced = map[string]crypto.PublicKey{}
		}
		e.replaced[serial] = key.Public()
		e.mu.Unlock()
		return meshclient.Result{}, errors.New("read tcp 127.0.0.1:15443: connection reset by peer (the answer of a renewal the server made)")
	}
	e.renews++
	e.mu.Unlock()
	if e.Renewed != nil {
		select {
		case e.Renewed <- cn:
		case <-ctx.Done():
		}
	}
	return meshclient.Result{CertificatePEM: certPEM, CAPEM: e.CA.PEM, XDSAddress: e.XDSAddress, Identity: cn}, nil
}
