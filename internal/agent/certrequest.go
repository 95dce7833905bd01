package agent

// One proxy certificate request, from its key to the saved identity: what
// `osm-agent enroll`, the agent's enrollment and its renewal all do.

import (
	"context"
	"crypto"
	"crypto/ecdsa"

	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// CertRequest asks the server for a proxy certificate and saves it with
// its key: it generates the key (meshapi.GenerateKey) on its first
// [CertRequest.Obtain] and keeps it for every later one, so that a retry
// after a lost answer asks for the same key (a renewal the server made
// but whose answer was lost is answered again only for that key). Use a
// new CertRequest for a new key.
type CertRequest struct {
	// Dir is the data directory the identity is saved in (SaveIdentity).
	Dir string

	key    *ecdsa.PrivateKey
	keyPEM []byte
}

// SaveError is a failure to save an identity the server has issued: the
// server did answer (an enrollment has spent its token use). Its text is
// the save's own.
type SaveError struct{ Err error }

func (e *SaveError) Error() string { return e.Err.Error() }
func (e *SaveError) Unwrap() error { return e.Err }

// Obtain asks for a certificate with ask, called with the request's key,
// and saves the key, the certificate and the answer's CA bundle (caPEM
// when the answer has none) in Dir. The key is encoded before ask is
// called, so nothing the server is asked for fails to save for a local
// reason found only afterwards. A failure to save is a *SaveError, and
// the answer is returned with it.
func (r *CertRequest) Obtain(ctx context.Context, caPEM []byte, ask func(ctx context.Context, key crypto.Signer) (meshclient.Result, error)) (meshclient.Result, Identity, error) {
	if r.key == nil {
		key, err := meshapi.GenerateKey()
		if err != nil {
			return meshclient.Result{}, Identity{}, err
		}
		keyPEM, err := MarshalKey(key)
		if err != nil {
			return meshclient.Result{}, Identity{}, err
		}
		r.key, r.keyPEM = key, keyPEM
	}
	res, err := ask(ctx, r.key)
	if err != nil {
		return res, Identity{}, err
	}
	if len(res.CAPEM) > 0 {
		caPEM = res.CAPEM
	}
	id := Identity{KeyPEM: r.keyPEM, CertPEM: res.CertificatePEM, CAPEM: caPEM}
	if err := SaveIdentity(r.Dir, id); err != nil {
		return res, id, &SaveError{err}
	}
	return res, id, nil
}
