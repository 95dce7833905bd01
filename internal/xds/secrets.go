package xds

import (
	"context"
	"fmt"

	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// CertSource gives the service certificates proxies receive by SDS.
type CertSource interface {
	ServiceCertificate(ctx context.Context, sa mesh.ServiceAccount) (*certificate.Certificate, error)
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

// dropSecrets forgets the secret set of sa, to be built again when next
// needed.
func (p *Publisher) dropSecrets(sa mesh.ServiceAccount) {
	if set := p.secrets[sa]; set != nil {
		delete(p.secrets, sa)
		p.interned.Release(set.Resources()...)
	}
}

// secretSet returns the SDS secrets of svc's service account.
func (p *Publisher) secretSet(ctx context.Context, svc mesh.MeshService) (*cache.Set, error) {
	info, ok := p.view.Spec().Service(svc)
	sa := mesh.ServiceAccount{Namespace: svc.Namespace, Name: svc.Name}
	if ok {
		sa = info.ServiceAccount
	}
	if s := p.secrets[sa]; s != nil {
		return s, nil
	}
	cert, err := p.certs.ServiceCertificate(ctx, sa)
	if err != nil {
		return nil, fmt.Errorf("service certificate of %s: %w", sa, err)
	}
	secrets, err := render.Secrets(cert.GetCertificateChain(), cert.GetPrivateKey(), p.certs.RootPEM())
	if err != nil {
		return nil, err
	}
	set, err := cache.InternedSet(p.interned, secrets)
	if err != nil {
		return nil, err
	}
	p.secrets[sa] = set
	p.interned.Retain(set.Resources()...)
	return set, nil
}

func (p *Publisher) publishSecrets(ctx context.Context, n *node) {
	set, err := p.secretSet(ctx, n.proxy.Service)
	if err != nil {
		p.log.Error("service certificate not published", "node", n.proxy.NodeID, "err", err)
		return
	}
	p.publish(n.proxy.NodeID, resource.SecretType, set)
}
