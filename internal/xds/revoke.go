package xds

// Revocations: a revoked proxy's streams end at once, and after missed
// announcements every live stream's proxy is checked again.

import (
	"context"
	"fmt"

	"github.com/osm-vm/osm-vm/internal/certificate"
)

// Disconnect ends every live stream of the proxy with this CN.
func (s *Server) Disconnect(cn string, cause error) int {
	return s.table.cancel(func(st *stream) bool { return st.cn == cn }, cause)
}

// WatchRevocations ends the streams of every proxy revoked from now on,
// until ctx is done. subscribe is the certificate manager's Subscribe.
func (s *Server) WatchRevocations(ctx context.Context, subscribe func() (<-chan certificate.Announcement, func())) error {
	ch, cancel := subscribe()
	defer cancel()
	for {
		select {
		case <-ctx.Done():
			return nil
		case a := <-ch:
			switch a.Kind {
			case certificate.ProxyRevoked:
				if n := s.Disconnect(a.ProxyCN, ErrRevoked); n > 0 {
					s.log.Info("revoked proxy disconnected", "cn", a.ProxyCN, "streams", n)
				}
			case certificate.Resync:
				// Announcements were dropped: a revocation may be among them.
				s.recheck(ctx)
			}
		}
	}
}

// recheck verifies every live stream's proxy again and ends the streams of
// those no longer allowed.
func (s *Server) recheck(ctx context.Context) {
	for _, st := range s.table.live() {
		if err := s.ident.allowed(ctx, st.peer); err != nil {
			s.log.Info("proxy no longer allowed; closing its stream", "cn", st.cn, "err", err)
			st.cancel(fmt.Errorf("%w: %v", ErrRevoked, err))
		}
	}
}
