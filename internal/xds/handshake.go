package xds

// How long a new connection may take to become a stream: each read of its
// TLS handshake and HTTP/2 preface bounded by the peer's silence, the whole
// by gRPC's ConnectionTimeout, and the connections counted for Server.Load.

import (
	"net"
	"sync/atomic"
	"time"
)

// DefaultHandshakeTimeout bounds how long the peer of a new connection to
// the xDS port may stay silent during its TLS handshake and before its
// HTTP/2 preface (and, times six, the whole handshake: see
// handshakeListener); gRPC's own default, 120 s for the whole handshake,
// let a peer that sends nothing hold a connection (and a file descriptor)
// for two minutes. A proxy on a slow link answers in well under a second.
const DefaultHandshakeTimeout = 10 * time.Second

// handshakeListener bounds the handshake (TLS, then the HTTP/2 preface) of
// every connection it accepts by the peer's silence, not by the server's
// own backlog: each read the handshake makes must be answered within idle,
// and the whole handshake must end by gRPC's ConnectionTimeout (set to
// wholeHandshake(idle)).
//
// A bound on the whole handshake alone counts the time a connection waits
// for this server's CPU. In a reconnect storm (10,000 proxies at once on 2
// cores) every handshake progresses at once and most finish only after
// several seconds; a 10 s whole-handshake bound closed thousands of them,
// whose proxies came back after their backoff, and the storm took 25 s
// instead of 16 s (osm-bench M6). A peer that sends nothing, or stops in
// the middle of its ClientHello, is still closed after idle.
type handshakeListener struct {
	net.Listener
	idle time.Duration
	// userTimeout is set as TCP_USER_TIMEOUT on each connection: gRPC sets
	// it itself only on a *net.TCPConn, which a handshakeConn is not.
	userTimeout time.Duration
	// counts, when set, counts the connections accepted and those in
	// their handshake (see Server.Load).
	counts *handshakeCounts
}

// handshakeCounts counts a listener's connections: accepted since it
// started, and accepted whose handshake has neither ended nor failed.
type handshakeCounts struct {
	accepted    atomic.Uint64
	handshaking atomic.Int64
}

// wholeHandshake is the bound on a whole handshake for a given silence
// bound: a slow peer may send a byte every idle, but not for longer.
func wholeHandshake(idle time.Duration) time.Duration { return 6 * idle }

func (l handshakeListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	if tc, ok := c.(*net.TCPConn); ok && l.userTimeout > 0 {
		setTCPUserTimeout(tc, l.userTimeout)
	}
	hc := &handshakeConn{Conn: c, idle: l.idle, counts: l.counts}
	hc.handshaking.Store(true)
	if l.counts != nil {
		l.counts.accepted.Add(1)
		l.counts.handshaking.Add(1)
	}
	return hc, nil
}

// handshakeConn is a connection in its handshake until gRPC clears its
// deadline (after the HTTP/2 preface): until then each Read waits at most
// idle for the peer, and never past the whole-handshake deadline gRPC set.
type handshakeConn struct {
	net.Conn
	idle        time.Duration
	handshaking atomic.Bool
	counts      *handshakeCounts // may be nil
	// end is the whole-handshake deadline (gRPC's SetDeadline at accept);
	// only the handshaking goroutine reads and writes it.
	end time.Time
}

func (c *handshakeConn) Read(b []byte) (int, error) {
	if c.handshaking.Load() {
		d := time.Now().Add(c.idle)
		if !c.end.IsZero() && c.end.Before(d) {
			d = c.end
		}
		if err := c.Conn.SetReadDeadline(d); err != nil {
			return 0, err
		}
	}
	return c.Conn.Read(b)
}

// SetDeadline is how gRPC bounds the handshake: a deadline when the
// connection is accepted, the zero time once the handshake is done.
func (c *handshakeConn) SetDeadline(t time.Time) error {
	if t.IsZero() {
		c.handshakeOver()
	} else if c.handshaking.Load() {
		c.end = t
	}
	return c.Conn.SetDeadline(t)
}

// Close closes the connection, no longer counted as handshaking (gRPC
// clears the deadline whatever the handshake's outcome; a connection
// closed before, as the server stops, is not counted either).
func (c *handshakeConn) Close() error {
	c.handshakeOver()
	return c.Conn.Close()
}

// handshakeOver marks the handshake ended, once.
func (c *handshakeConn) handshakeOver() {
	if c.handshaking.CompareAndSwap(true, false) && c.counts != nil {
		c.counts.handshaking.Add(-1)
	}
}
