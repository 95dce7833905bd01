package xds

import (
	"context"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
)

// CertSource gives the service certificates proxies receive by SDS. A
// publish pass never waits for one to be issued: RequestServiceCertificate
// returns the one the source holds, or an error wrapping
// certificate.ErrPending and the source issues it on its own goroutine and
// announces it (Issued or Rotated), when the publisher sends the secrets
// to that account's Envoy proxies.
type CertSource interface {
	RequestServiceCertificate(ctx context.Context, sa mesh.ServiceAccount) (*certificate.Certificate, error)
	RootPEM() []byte
	Subscribe() (<-chan certificate.Announcement, func())
}

// allAccounts in a rotation set means "every service account" (after a
// Resync announcement some rotations may have been missed).
var allAccounts = mesh.ServiceAccount{}

func noteRotation(rotated map[mesh.ServiceAccount]bool, a certificate.Announcement) {
	switch a.Kind {
	case certificate.Rotated, certificate.Issued, certificate.Released:
		rotated[a.ServiceAccount] = true
	case certificate.Resync:
		rotated[allAccounts] = true
	}
}
