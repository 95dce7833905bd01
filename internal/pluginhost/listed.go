package pluginhost

import (
	"context"
	"log/slog"
	"time"
)

// DefaultListWait is how long osm-server's xDS waits at most for the
// providers' first lists before it serves without them.
const DefaultListWait = 30 * time.Second

// WaitListed returns once every instance has sent its first list, ctx is
// done, or max has passed (logging which instances it gave up on). A
// server starts xDS after it: a proxy that reconnects after a restart
// must not be told its upstreams have no endpoints.
func (h *Host) WaitListed(ctx context.Context, max time.Duration) {
	waitForProviders(ctx, h.log, h, max)
}

// listing is what waitForProviders needs of the host.
type listing interface {
	Waiting() []string
	Listed() <-chan struct{}
}

// waitForProviders returns once every provider has sent its first list,
// ctx is done, or max has passed (logging which providers it gave up on).
func waitForProviders(ctx context.Context, log *slog.Logger, p listing, max time.Duration) {
	if len(p.Waiting()) == 0 {
		return
	}
	start := time.Now()
	log.Info("xDS waits for every provider's first list of endpoints", "max", max)
	deadline := time.NewTimer(max)
	defer deadline.Stop()
	select {
	case <-ctx.Done():
	case <-deadline.C:
		log.Warn("serving xDS before every provider has listed its endpoints: their services have no endpoints until they do (see /api/v1/providers)", "waiting", p.Waiting(), "after", max)
	case <-p.Listed():
		log.Info("every provider has listed its endpoints; serving xDS", "after", time.Since(start).Round(time.Millisecond))
	}
}
