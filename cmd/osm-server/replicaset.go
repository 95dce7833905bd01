package main

import (
	"net"
	"net/netip"
	"net/url"
	"os"

	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// advertisedReplica is how agents reach this replica, for the replica
// list in the agent config: the API and xDS listeners' own host when it is
// a specific address, else the first serverNames entry, with each
// listener's port. ok is false when neither gives a host (a listener on
// 0.0.0.0 and no serverNames): the replica then registers nothing and
// agents keep the servers they were given.
func advertisedReplica(cfg Config) (r meshapi.Replica, ok bool) {
	host := func(addr string) (string, string) {
		h, port, err := net.SplitHostPort(addr)
		if err != nil {
			return "", ""
		}
		if ip, err := netip.ParseAddr(h); h == "" || (err == nil && ip.IsUnspecified()) {
			if len(cfg.ServerNames) == 0 {
				return "", port
			}
			h = cfg.ServerNames[0]
		}
		return h, port
	}
	apiHost, apiPort := host(cfg.APIAddress)
	xdsHost, xdsPort := host(cfg.XDSAddress)
	if apiHost == "" || xdsHost == "" || apiPort == "0" || xdsPort == "0" {
		return meshapi.Replica{}, false
	}
	return meshapi.Replica{API: "https://" + net.JoinHostPort(apiHost, apiPort), XDS: net.JoinHostPort(xdsHost, xdsPort)}, true
}

// presenceKey names this replica's record of connected proxies
// (internal/presence): the replica list's key (its API URL, path-escaped),
// or for a replica not in the list its host name and API address. Either
// stays the same across restarts, so a replica that was killed overwrites
// what it left when it starts again.
func presenceKey(cfg Config, self meshapi.Replica) string {
	if self.API != "" {
		return url.PathEscape(self.API)
	}
	host, _ := os.Hostname()
	return url.PathEscape(host + "/" + cfg.APIAddress)
}
