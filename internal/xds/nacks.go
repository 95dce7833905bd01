package xds

import (
	"log/slog"
	"sync"
	"time"

	rpcstatus "google.golang.org/genproto/googleapis/rpc/status"

	"github.com/osm-vm/osm-vm/internal/clip"
)

// A NACK's message (error_detail) is the proxy's to choose, and the
// server keeps it (the cache's record, /debug/proxies, the dashboard) and
// logs it. A 3 MB message made the dashboard's state 6 MB, and a proxy
// reconnecting with one NACK after another wrote 80 MB of log in 22 s.
// So the server cuts every NACK's message to maxNACKMessage as it
// receives it, before anything keeps it (an Envoy rejection naming a few
// resources and their errors fits whole), and logs a proxy's NACKs once,
// then at most once per nackLogEvery with how many were not logged; the
// limit belongs to the proxy's certificate's CN, so reconnecting does
// not reset it. osm_xds_nacks_total counts every NACK.
const (
	maxNACKMessage = 2048
	nackLogEvery   = time.Minute
	// maxLogLimits bounds the identities whose logging is limited
	// separately (about 100 bytes each); beyond, while nackLogEvery has
	// not forgotten enough of them, the others share one limit.
	maxLogLimits = 16384
)

// clipNACK cuts a NACK's message to maxNACKMessage and drops its details
// (nothing reads them), in place: before the cache records it.
func clipNACK(d *rpcstatus.Status) {
	d.Message = clip.String(d.Message, maxNACKMessage)
	d.Details = nil
}

// logLimiter decides which of a proxy's repeated events (NACKs, refused
// streams) are logged: per key (a proxy's CN), the first, then at most
// one per every, which says how many were not. A key is forgotten once
// its last event is every old, with the count of those not logged (for
// NACKs, osm_xds_nacks_total has them); at most max keys are held, the
// keys beyond sharing one limit.
type logLimiter struct {
	every time.Duration
	max   int
	now   func() time.Time

	mu     sync.Mutex
	keys   map[string]*logLimit
	shared logLimit  // for keys beyond max
	swept  time.Time // when keys were last swept of forgotten ones
}

type logLimit struct {
	logged     time.Time // the last event logged; zero: none yet
	seen       time.Time // the last event
	suppressed int       // events not logged since logged
}

func newLogLimiter(every time.Duration, max int, now func() time.Time) *logLimiter {
	return &logLimiter{every: every, max: max, now: now, keys: map[string]*logLimit{}}
}

// allow reports whether an event of key is logged, and if so how many
// were not logged since the last one that was (of key, or of every key
// beyond max when shared).
func (l *logLimiter) allow(key string) (ok bool, suppressed int, shared bool) {
	now := l.now()
	l.mu.Lock()
	defer l.mu.Unlock()
	if now.Sub(l.swept) >= l.every {
		for k, e := range l.keys {
			if now.Sub(e.seen) >= l.every {
				delete(l.keys, k)
			}
		}
		l.swept = now
	}
	e, found := l.keys[key]
	if !found {
		if len(l.keys) < l.max {
			e = &logLimit{}
			l.keys[key] = e
		} else {
			e, shared = &l.shared, true
		}
	}
	e.seen = now
	if !e.logged.IsZero() && now.Sub(e.logged) < l.every {
		e.suppressed++
		return false, 0, shared
	}
	suppressed, e.suppressed, e.logged = e.suppressed, 0, now
	return true, suppressed, shared
}

// nackLog handles the NACKs proxies send, before the cache records them:
// it cuts each message (clipNACK) and logs it unless the proxy's NACKs are
// being limited (logLimiter, by the proxy certificate's CN).
type nackLog struct {
	log   *slog.Logger
	limit *logLimiter
}

func newNACKLog(log *slog.Logger) *nackLog {
	return &nackLog{log: log, limit: newLogLimiter(nackLogEvery, maxLogLimits, time.Now)}
}

// nacked handles a NACK of type typeURL answering nonce from a stream of
// the proxy whose certificate's CN is cn.
func (n *nackLog) nacked(cn, typeURL, nonce string, d *rpcstatus.Status) {
	clipNACK(d)
	ok, suppressed, shared := n.limit.allow(cn)
	if !ok {
		return
	}
	attrs := []any{"cn", cn, "type", typeURL, "nonce", nonce, "error", d.GetMessage()}
	switch {
	case shared:
		attrs = append(attrs, slog.Int("suppressed_all_proxies", suppressed))
	case suppressed > 0:
		attrs = append(attrs, slog.Int("suppressed", suppressed))
	}
	n.log.Warn("proxy rejected xDS response; it keeps its last good configuration (GET /debug/proxies shows the rejected version)", attrs...)
}
