package xds

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	"google.golang.org/protobuf/encoding/protojson"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// ProxyStatus is one row of GET /debug/proxies.
type ProxyStatus struct {
	Proxy
	// Types are the per-type versions published, sent, ACKed and the last NACK.
	Types []cache.TypeStatus `json:"types"`
	// RenderError is the last error rendering this proxy's configuration;
	// while set the proxy keeps its last good configuration.
	RenderError string `json:"renderError,omitempty"`
}

// Debug serves the xDS debug views.
type Debug struct {
	Server    *Server
	Cache     *cache.Cache
	Publisher *Publisher
}

// Proxies returns every connected proxy with its xDS state.
func (d Debug) Proxies() []ProxyStatus {
	var out []ProxyStatus
	for _, p := range d.Server.Proxies() {
		ps := ProxyStatus{Proxy: p, Types: d.Cache.Status(p.NodeID)}
		if d.Publisher != nil {
			ps.RenderError = d.Publisher.RenderError(p.NodeID)
		}
		out = append(out, ps)
	}
	return out
}

// Config returns the configuration published for a proxy, as JSON: per
// type URL, the resources in protojson. proxy is a node ID or a CN (the
// Envoy flavour is preferred for a CN with both).
func (d Debug) Config(proxy string) (json.RawMessage, error) {
	view := d.Cache.View(proxy)
	if view == nil {
		view = d.Cache.View(proxy + "~grpc")
	}
	if view == nil {
		return nil, fmt.Errorf("no configuration published for proxy %q (GET /debug/proxies lists the connected ones)", proxy)
	}
	types := slices.Sorted(maps.Keys(view))
	var b strings.Builder
	b.WriteString("{")
	for i, t := range types {
		if i > 0 {
			b.WriteString(",")
		}
		name, _ := json.Marshal(t)
		b.Write(name)
		b.WriteString(":[")
		for j, r := range view[t].Resources() {
			if j > 0 {
				b.WriteString(",")
			}
			js, err := protojson.Marshal(r.Message())
			if err != nil {
				return nil, fmt.Errorf("encode %s %s: %w", t, r.Name(), err)
			}
			b.Write(js)
		}
		b.WriteString("]")
	}
	b.WriteString("}")
	return json.RawMessage(b.String()), nil
}
