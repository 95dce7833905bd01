package xds

import (
	"context"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
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

// serviceAccount returns the service account of svc's proxies.
func (p *Publisher) serviceAccount(svc mesh.MeshService) mesh.ServiceAccount {
	if info, ok := p.view.Spec().Service(svc); ok {
		return info.ServiceAccount
	}
	return mesh.ServiceAccount{Namespace: svc.Namespace, Name: svc.Name}
}

// secretSet returns the SDS secrets of svc's service account, or nil (and
// no error) while its certificate is being issued: the announcement of the
// certificate brings them (see pass). Safe in parallel renders (see
// publishGroups).
func (p *Publisher) secretSet(ctx context.Context, svc mesh.MeshService) (*cache.Set, error) {
	return p.secrets.Get(ctx, p.serviceAccount(svc))
}

func (p *Publisher) publishSecrets(ctx context.Context, n *node) {
	set, err := p.secretSet(ctx, n.proxy.Service)
	if err != nil {
		p.log.Error("service certificate not published", "node", n.proxy.NodeID, "err", err)
		return
	}
	if set == nil {
		return // pending: published when it is announced
	}
	p.publish(n.proxy.NodeID, resource.SecretType, set)
}
