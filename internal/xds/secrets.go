package xds

import (
	"bytes"
	"context"
	"errors"
	"fmt"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
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

// dropSecrets forgets the secret set of sa, to be built again when next
// needed.
func (p *Publisher) dropSecrets(sa mesh.ServiceAccount) {
	p.secretsMu.Lock()
	set := p.secrets[sa]
	delete(p.secrets, sa)
	p.secretsMu.Unlock()
	if set != nil {
		p.interned.Release(set.Resources()...)
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
// publishGroups): one account's set is built once.
func (p *Publisher) secretSet(ctx context.Context, svc mesh.MeshService) (*cache.Set, error) {
	sa := p.serviceAccount(svc)
	if s := p.heldSecrets(sa); s != nil {
		return s, nil
	}
	set, err, _ := p.secretsFlight.Do(sa.String(), func() (any, error) {
		if s := p.heldSecrets(sa); s != nil {
			return s, nil
		}
		return p.buildSecrets(ctx, sa)
	})
	s, _ := set.(*cache.Set)
	return s, err
}

func (p *Publisher) heldSecrets(sa mesh.ServiceAccount) *cache.Set {
	p.secretsMu.Lock()
	defer p.secretsMu.Unlock()
	return p.secrets[sa]
}

// buildSecrets renders and holds sa's secret set (nil while its
// certificate is pending).
func (p *Publisher) buildSecrets(ctx context.Context, sa mesh.ServiceAccount) (*cache.Set, error) {
	cert, err := p.certs.RequestServiceCertificate(ctx, sa)
	if errors.Is(err, certificate.ErrPending) {
		return nil, nil
	}
	if err != nil {
		return nil, fmt.Errorf("service certificate of %s: %w", sa, err)
	}
	// The mesh CA's secret is the same for every account: every set
	// shares one message, marshalled and validated once. The service's
	// is written as bytes (render.EncodeServiceCertSecret), never built
	// to be sent.
	root, err := p.rootSecret(p.certs.RootPEM())
	if err != nil {
		return nil, err
	}
	rootRes, err := p.interned.Resource(render.RootCASecret, root)
	if err != nil {
		return nil, err
	}
	b, err := cert.AppendPEM(nil, render.EncodeServiceCertSecret)
	if err != nil {
		return nil, err
	}
	certRes, err := p.cache.NewEncodedResource(render.ServiceCertSecret, (*tlsv3.Secret)(nil), b)
	if err != nil {
		return nil, err
	}
	set, err := cache.NewSet(rootRes, p.interned.Intern(certRes))
	if err != nil {
		return nil, err
	}
	p.interned.Retain(set.Resources()...)
	p.secretsMu.Lock()
	p.secrets[sa] = set
	p.secretsMu.Unlock()
	return set, nil
}

// rootSecret returns the root CA secret of root: the one rendered first
// for it, which it remembers until root changes.
func (p *Publisher) rootSecret(root []byte) (*tlsv3.Secret, error) {
	p.secretsMu.Lock()
	defer p.secretsMu.Unlock()
	if p.root.secret == nil || !bytes.Equal(p.root.pem, root) {
		s, err := render.RootSecret(root)
		if err != nil {
			return nil, err
		}
		p.root.pem, p.root.secret = root, s
	}
	return p.root.secret, nil
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
