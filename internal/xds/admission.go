package xds

// What one proxy may cost the server in streams: the bound on each proxy
// identity's concurrent streams, and the refusal of a stream beyond it.

import (
	"log/slog"
	"net"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

// DefaultMaxStreamsPerProxy bounds the xDS streams one proxy identity
// (certificate CN) may have open at once; a stream beyond is refused
// with ResourceExhausted. A machine's identity is shared by its Envoy
// (one ADS stream) and its proxyless gRPC applications, whose streams
// osm-agent's local endpoint carries upstream one for one: gRPC opens one
// per xds:/// target a process dials, and one if it serves with xDS. A
// machine with a few such applications needs tens; a reconnecting
// stream briefly overlaps the one it replaces until the server sees that
// end; and the agent's endpoint carries at most 30 by default (its
// localXDSMaxStreams), so its streams and Envoy's fit twice over. Each
// stream costs the server about 60 KB; 1,000 from one machine cost
// 62 MB.
const DefaultMaxStreamsPerProxy = 64

// streamLimit bounds each proxy identity's (certificate CN's) concurrent
// streams. It has no lock of its own: the table that holds it guards it
// with its own (streamTable.mu), so that a count goes up and down with the
// table's streams: a stream in the table is counted, and its removal
// uncounts it.
type streamLimit struct {
	log *slog.Logger
	max int
	// perCN counts the live streams of each CN that has any.
	perCN map[string]int
	// refused limits the logging of each proxy's refused streams.
	refused *logLimiter
}

func newStreamLimit(log *slog.Logger, max int) streamLimit {
	return streamLimit{log: log, max: max, perCN: map[string]int{}, refused: newLogLimiter(nackLogEvery, maxLogLimits, time.Now)}
}

// take counts a new stream of cn, or refuses it with ResourceExhausted
// naming the bound when cn has as many open as allowed (logged at most
// once per nackLogEvery per identity). peer is the connection's remote
// address, for the log.
func (l *streamLimit) take(cn string, peer net.Addr) error {
	if n := l.perCN[cn]; n >= l.max {
		if ok, suppressed, _ := l.refused.allow(cn); ok {
			l.log.Warn("xDS stream refused: the proxy has the most streams allowed open", "cn", cn, "peer", peer.String(), "streams", n, "xdsMaxStreamsPerProxy", l.max, "suppressed", suppressed)
		}
		return status.Errorf(codes.ResourceExhausted, "proxy %s has %d xDS streams open, the most osm-server allows one proxy identity (xdsMaxStreamsPerProxy %d): close the streams it does not use, or raise xdsMaxStreamsPerProxy in the osm-server config", cn, n, l.max)
	}
	l.perCN[cn]++
	return nil
}

// release uncounts an ended stream of cn.
func (l *streamLimit) release(cn string) {
	if l.perCN[cn]--; l.perCN[cn] <= 0 {
		delete(l.perCN, cn)
	}
}
