// Package secrets owns the SDS secret set of each service account that
// the xDS publisher sends to Envoy and gateway proxies: built once per
// account (parallel renders of one account's proxies wait for one build),
// held interned until the account's certificate is announced again, and
// the mesh CA's secret shared by every set. It must not import its parent
// internal/xds (the publisher uses it, not the other way round), nor know
// proxies or groups.
package secrets

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"sync"

	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"golang.org/x/sync/singleflight"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/xds/cache"
	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// Certs gives the service certificates and the mesh CA the sets are
// rendered from. RequestServiceCertificate never waits for an issue: it
// returns the certificate held, or an error wrapping
// certificate.ErrPending.
type Certs interface {
	RequestServiceCertificate(ctx context.Context, sa mesh.ServiceAccount) (*certificate.Certificate, error)
	RootPEM() []byte
}

// Options is what Sets builds with.
type Options struct {
	Cache    *cache.Cache
	Interner *cache.Interner // the sets' Resources are held in it
	Certs    Certs
}

// Sets holds the secret set of each service account. Safe for concurrent
// use.
type Sets struct {
	cache    *cache.Cache
	interner *cache.Interner
	certs    Certs

	flight singleflight.Group // one build per account at a time
	mu     sync.Mutex         // guards sets and root
	sets   map[mesh.ServiceAccount]held
	// root is the mesh CA's secret every set shares (see rootSecret),
	// and the PEM it was rendered from.
	root struct {
		pem    []byte
		secret *tlsv3.Secret
	}
}

type held struct {
	set  *cache.Set
	hold cache.Hold
}

// New returns empty Sets.
func New(o Options) *Sets {
	return &Sets{cache: o.Cache, interner: o.Interner, certs: o.Certs, sets: map[mesh.ServiceAccount]held{}}
}

// Drop forgets the secret set of sa, to be built again when next needed.
func (s *Sets) Drop(sa mesh.ServiceAccount) {
	s.mu.Lock()
	h := s.sets[sa]
	delete(s.sets, sa)
	s.mu.Unlock()
	h.hold.Release()
}

// DropAll forgets every account's set. The map is cleared in place (its
// space kept for the sets built again), the sets released under the lock:
// nothing the Interner calls takes it.
func (s *Sets) DropAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, h := range s.sets {
		h.hold.Release()
	}
	clear(s.sets)
}

// Get returns the SDS secrets of sa, or nil (and no error) while its
// certificate is being issued: the announcement of the certificate brings
// them. Safe in parallel renders: one account's set is built once.
func (s *Sets) Get(ctx context.Context, sa mesh.ServiceAccount) (*cache.Set, error) {
	if set := s.held(sa); set != nil {
		return set, nil
	}
	set, err, _ := s.flight.Do(sa.String(), func() (any, error) {
		if set := s.held(sa); set != nil {
			return set, nil
		}
		return s.build(ctx, sa)
	})
	out, _ := set.(*cache.Set)
	return out, err
}

func (s *Sets) held(sa mesh.ServiceAccount) *cache.Set {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.sets[sa].set
}

// build renders and holds sa's secret set (nil while its certificate is
// pending).
func (s *Sets) build(ctx context.Context, sa mesh.ServiceAccount) (*cache.Set, error) {
	cert, err := s.certs.RequestServiceCertificate(ctx, sa)
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
	root, err := s.rootSecret(s.certs.RootPEM())
	if err != nil {
		return nil, err
	}
	rootRes, err := s.interner.Resource(render.RootCASecret, root)
	if err != nil {
		return nil, err
	}
	b, err := cert.AppendPEM(nil, render.EncodeServiceCertSecret)
	if err != nil {
		return nil, err
	}
	certRes, err := s.cache.NewEncodedResource(render.ServiceCertSecret, (*tlsv3.Secret)(nil), b)
	if err != nil {
		return nil, err
	}
	set, err := cache.NewSet(rootRes, s.interner.Intern(certRes))
	if err != nil {
		return nil, err
	}
	h := held{set: set, hold: s.interner.Hold(set.Resources()...)}
	s.mu.Lock()
	s.sets[sa] = h
	s.mu.Unlock()
	return set, nil
}

// rootSecret returns the root CA secret of root: the one rendered first
// for it, which it remembers until root changes.
func (s *Sets) rootSecret(root []byte) (*tlsv3.Secret, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.root.secret == nil || !bytes.Equal(s.root.pem, root) {
		sec, err := render.RootSecret(root)
		if err != nil {
			return nil, err
		}
		s.root.pem, s.root.secret = root, sec
	}
	return s.root.secret, nil
}
