package main

import (
	"fmt"
	"strings"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/osm-vm/osm-vm/internal/certificate"
	"github.com/osm-vm/osm-vm/internal/dashboard"
	"github.com/osm-vm/osm-vm/internal/xds"
)

// instrumented is a component that registers what it measures.
type instrumented interface {
	Instrument(reg prometheus.Registerer) error
}

// instrument registers every part's metrics with reg.
func instrument(reg prometheus.Registerer, parts ...instrumented) error {
	for _, p := range parts {
		if err := p.Instrument(reg); err != nil {
			return fmt.Errorf("registering the metrics of %T: %w", p, err)
		}
	}
	return nil
}

// dashboardProxies adapts the xDS debug view to the dashboard's rows: the
// latest ACK of any type and the last NACK.
func dashboardProxies(d xds.Debug) func() []dashboard.Proxy {
	return func() []dashboard.Proxy {
		ps := d.Proxies()
		out := make([]dashboard.Proxy, 0, len(ps))
		for _, p := range ps {
			row := dashboard.Proxy{CN: p.CN, Service: p.Service.String(), Flavor: p.Flavor.String(), Address: p.Address.String(), Connected: p.Connected}
			for _, t := range p.Types {
				if t.ACKedAt.After(row.LastACK) {
					row.LastACK = t.ACKedAt
				}
				if k := t.NACK; k != nil && k.Time.After(row.NACKAt) {
					row.NACK, row.NACKType, row.NACKAt = k.Error, shortType(k.TypeURL), k.Time
				}
			}
			out = append(out, row)
		}
		return out
	}
}

// shortType names an xDS type URL by its message name.
func shortType(typeURL string) string {
	return typeURL[strings.LastIndex(typeURL, ".")+1:]
}

// dashboardCertificates adapts the certificate manager's expiries.
func dashboardCertificates(m *certificate.Manager) func() (dashboard.Certificate, []dashboard.Certificate) {
	return func() (dashboard.Certificate, []dashboard.Certificate) {
		var out []dashboard.Certificate
		for _, e := range m.Expiries() {
			out = append(out, dashboard.Certificate{Name: e.ServiceAccount, Expires: e.Expires, RotateAt: e.RotateAt})
		}
		return dashboard.Certificate{Name: "mesh CA", Expires: m.CAExpires()}, out
	}
}
