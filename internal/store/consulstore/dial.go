package consulstore

import (
	"net"
	"time"
)

// Connections to Consul notice a dead peer within seconds: a cut link or a
// host gone without a FIN otherwise leaves a request waiting on a TCP
// connection that leads nowhere, for as long as the kernel's retransmission
// timer (minutes) or the 30 s keepalive of Consul's default transport.
const (
	// dialTimeout bounds connecting to the agent.
	dialTimeout = 10 * time.Second
	// keepAlive probes an idle connection (a blocking query waiting for
	// its answer) after keepAlive idle, every keepAlive, and gives up
	// after keepAliveProbes unanswered.
	keepAlive       = 5 * time.Second
	keepAliveProbes = 3
	// userTimeout (Linux) drops a connection whose sent data stays
	// unacknowledged that long: a write sent into a cut link fails with
	// an error instead of waiting out the caller's timeout.
	userTimeout = 10 * time.Second
)

func dialer() *net.Dialer {
	return &net.Dialer{
		Timeout:         dialTimeout,
		KeepAliveConfig: net.KeepAliveConfig{Enable: true, Idle: keepAlive, Interval: keepAlive, Count: keepAliveProbes},
		Control:         setUserTimeout,
	}
}
