package dnspublish

import (
	"net/netip"
	"sync"

	"github.com/osm-vm/osm-vm/internal/catalog"
)

// Views is what ViewSource needs of the mesh model (catalog.Model).
type Views interface {
	View() *catalog.View
	Subscribe() (notify <-chan struct{}, cancel func())
}

// ViewSource publishes the mesh Services that ask for it: each host name
// of a Service's spec.AnnotationExternalDNSName annotation gets the
// addresses of the service's participant endpoints (those the mesh model
// publishes to proxies). It is the source until ingress gateways feed the
// publisher (their listeners' host names and the gateway machines'
// addresses); [Merge] joins several sources.
type ViewSource struct{ Views Views }

// Names returns the annotated services' names and endpoint addresses.
func (s ViewSource) Names() map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	v := s.Views.View()
	if v == nil || v.Spec() == nil {
		return out
	}
	for svc, names := range v.Spec().ExternalDNSNames() {
		for _, e := range v.Endpoints(svc) {
			for _, n := range names {
				out[n] = append(out[n], e.IP)
			}
		}
	}
	return out
}

// Subscribe signals when the model publishes a new view.
func (s ViewSource) Subscribe() (<-chan struct{}, func()) { return s.Views.Subscribe() }

// Merge returns a Source that publishes the union of srcs (a name listed
// by several gets every address they give).
func Merge(srcs ...Source) Source { return merged(srcs) }

type merged []Source

func (m merged) Names() map[string][]netip.Addr {
	out := map[string][]netip.Addr{}
	for _, s := range m {
		for n, addrs := range s.Names() {
			out[n] = append(out[n], addrs...)
		}
	}
	return out
}

func (m merged) Subscribe() (<-chan struct{}, func()) {
	ch := make(chan struct{}, 1)
	var cancels []func()
	done := make(chan struct{})
	var wg sync.WaitGroup
	for _, s := range m {
		n, c := s.Subscribe()
		cancels = append(cancels, c)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				select {
				case <-done:
					return
				case <-n:
					select {
					case ch <- struct{}{}:
					default:
					}
				}
			}
		}()
	}
	return ch, func() {
		close(done)
		wg.Wait()
		for _, c := range cancels {
			c()
		}
	}
}
