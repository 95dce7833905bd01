// Package ejections keeps what the agents report of the backends their
// Envoy has ejected right now (outlier detection): the latest report of
// each proxy, by its certificate's CN, with when it came. The HTTPS API's
// POST /api/v1/agent/ejections (internal/api) fills it; the dashboard
// reads it.
//
// It holds no policy and renders nothing: it imports only the wire type
// (internal/meshapi), and the xDS server neither writes nor reads it, so
// reports never touch the configuration hot path.
package ejections

import (
	"sync"
	"time"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// Store is the latest ejection report of each proxy.
type Store struct {
	now func() time.Time

	mu      sync.Mutex
	byProxy map[string]entry
}

type entry struct {
	report meshapi.EjectionReport
	at     time.Time
}

// New returns an empty store; now is the clock (time.Now when nil).
func New(now func() time.Time) *Store {
	if now == nil {
		now = time.Now
	}
	return &Store{now: now, byProxy: map[string]entry{}}
}

// SetEjections keeps r as proxy cn's latest report; an empty one clears it.
func (s *Store) SetEjections(cn string, r meshapi.EjectionReport) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(r.Clusters) == 0 {
		delete(s.byProxy, cn)
		return
	}
	s.byProxy[cn] = entry{report: r, at: s.now()}
}

// Reports returns the reports younger than meshapi.EjectionReportMaxAge,
// by proxy CN (older ones are dropped: their agent stopped reporting).
// The reports must not be modified.
func (s *Store) Reports() map[string]meshapi.EjectionReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	out := make(map[string]meshapi.EjectionReport, len(s.byProxy))
	for cn, e := range s.byProxy {
		if now.Sub(e.at) > meshapi.EjectionReportMaxAge {
			delete(s.byProxy, cn)
			continue
		}
		out[cn] = e.report
	}
	return out
}
