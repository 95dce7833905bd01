package certificate

import (
	"context"
	"time"
)

// LifetimeSource is where the lifetimes of the certificates issued come
// from while Run runs (osm-server's MeshConfig): Lifetimes returns them,
// Subscribe notifies of a change.
type LifetimeSource interface {
	Subscribe() (notify <-chan struct{}, cancel func())
	Lifetimes() (service, proxy time.Duration)
}

// followLifetimes applies src's certificate lifetimes (SetLifetimes)
// whenever they change, until ctx is done; they apply to certificates
// issued from then on.
func (m *Manager) followLifetimes(ctx context.Context, src LifetimeSource) {
	notify, cancel := src.Subscribe()
	defer cancel()
	for {
		svc, proxy := src.Lifetimes()
		if oldSvc, oldProxy := m.Lifetimes(); svc != oldSvc || proxy != oldProxy {
			if err := m.SetLifetimes(svc, proxy); err != nil {
				m.log.Error("MeshConfig certificate lifetimes not applied; the previous ones stay", "err", err)
			} else {
				m.log.Info("certificate lifetimes set by MeshConfig; certificates issued from now on get them", "service", svc, "proxy", proxy)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-notify:
		}
	}
}
