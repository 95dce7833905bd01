package render

import (
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsinspectorv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/listener/tls_inspector/v3"
	hcmv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/types/known/durationpb"
	"google.golang.org/protobuf/types/known/wrapperspb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// Ingress gateway proxies (flavour [Gateway]): the Envoy of a machine
// enrolled as a Gateway's service (its namespace and name). It receives
//
//	LDS  gateway|<ns>/<gw>|<port>              a listener per port of the Gateway's listeners, on the
//	                                           machine's address (per proxy, like inbound listeners):
//	                                           HTTP: one filter chain; HTTPS: one per Gateway listener,
//	                                           chosen by SNI, terminating TLS with the certificate files
//	                                           the listener's certificateRef names (GatewayCertFiles);
//	                                           TCP and TLS: tcp_proxy chains (see gateway_l4.go)
//	RDS  gateway|<ns>/<gw>|<port>              HTTP: a virtual host per host name of the port's listeners
//	     gateway|<ns>/<gw>|<port>|<listener>   HTTPS: those of one listener
//	CDS  <ns>/<svc>                            the mesh EDS cluster of each backend the Gateway's service
//	                                           account may call (the same cluster every caller gets: mTLS
//	                                           with the gateway's service certificate)
//	EDS  <ns>/<svc>                            their endpoints
//	     gateway|refuse                        with TCP or TLS listeners: no endpoints (see gateway_l4.go)
//	SDS  service-cert, root-ca                 the gateway's service certificate and the mesh CA
//
// A backend TrafficTargets do not let the gateway's service account call
// gets no cluster and no share of a rule's calls, and a rule with no other
// backend answers 403, as for any caller (and the backend's own RBAC
// refuses the gateway's certificate all the same).

const tlsInspector = "envoy.filters.listener.tls_inspector"

// GatewayListenerName names a gateway proxy's listener (and the route
// configuration of an HTTP port) of port.
func GatewayListenerName(gw mesh.MeshService, port int) string {
	return "gateway|" + gw.String() + "|" + strconv.Itoa(port)
}

// gatewayProxyPlan is what a gateway proxy is rendered from: its Gateway and
// the backends its service account may call.
type gatewayProxyPlan struct {
	info    gateway.Info
	allowed []mesh.MeshService // sorted; each a Service that exists
}

func planGateway(m Mesh, p Proxy) (gatewayProxyPlan, error) {
	info, ok := m.Spec().Gateway(p.Service)
	if !ok {
		return gatewayProxyPlan{}, errNoGateway(p)
	}
	gp := gatewayProxyPlan{info: info}
	for _, svc := range info.Services() {
		if _, ok := m.Spec().Service(svc); ok && m.Spec().Allows(info.ServiceAccount, svc) {
			gp.allowed = append(gp.allowed, svc)
		}
	}
	return gp, nil
}

// outboundFor is the outbound through which the shared route rendering
// (gatewayRoute) sees one rule of a gateway listener, with the failure
// handling of the gateway's calls by the rule (see call).
func (gp gatewayProxyPlan) outboundFor(m Mesh, r gateway.Rule) outbound {
	port := spec.ServicePort{AppProtocol: "http"}
	if r.Route.Kind == spec.KindGRPCRoute {
		port.AppProtocol = "grpc"
	}
	o := outbound{port: port, gw: &gatewayPlan{allowed: gp.allowed}}
	o.setCall(gp.call(m, r))
	return o
}

// call is the failure handling of the gateway's calls by rule r, as a
// mesh caller's (applyCall; the rule's own timeouts and retry win): the
// Route policy of each Service port the rule sends to that the gateway
// may call, the gateway's service account as the caller (spec's
// CallResilience: a Retry whose source is that account applies, as
// TrafficTargets naming it do), each part taken where every such backend
// has it the same. A route's timeouts, retry and fault are the route's,
// not a backend's, so a part the backends differ on is left out.
func (gp gatewayProxyPlan) call(m Mesh, r gateway.Rule) resilience.Route {
	var out resilience.Route
	first := true
	for _, b := range r.Backends {
		if !b.Valid || b.Weight <= 0 {
			continue
		}
		if _, ok := slices.BinarySearchFunc(gp.allowed, b.Service, mesh.MeshService.Compare); !ok {
			continue
		}
		c := m.Spec().CallResilience(gp.info.ServiceAccount, b.Service, b.Port)
		if first {
			out, first = c, false
			continue
		}
		out = agreed(out, c)
	}
	return out
}

// agreed is the parts of a that b has the same (rendering the same).
func agreed(a, b resilience.Route) resilience.Route {
	same := func(x, y resilience.Route) bool { return callKeyOf(x, "") == callKeyOf(y, "") }
	if !same(resilience.Route{RequestTimeout: a.RequestTimeout}, resilience.Route{RequestTimeout: b.RequestTimeout}) {
		a.RequestTimeout = nil
	}
	if !same(resilience.Route{IdleTimeout: a.IdleTimeout}, resilience.Route{IdleTimeout: b.IdleTimeout}) {
		a.IdleTimeout = nil
	}
	if !same(resilience.Route{Retry: a.Retry}, resilience.Route{Retry: b.Retry}) {
		a.Retry = nil
	}
	if !same(resilience.Route{Fault: a.Fault}, resilience.Route{Fault: b.Fault}) {
		a.Fault = nil
	}
	if !same(resilience.Route{HashPolicy: a.HashPolicy}, resilience.Route{HashPolicy: b.HashPolicy}) {
		a.HashPolicy = nil
	}
	return a
}

// faults reports whether a rule of the listeners ls injects faults.
func (gp gatewayProxyPlan) faults(m Mesh, ls []gateway.Listener) bool {
	for _, l := range ls {
		for _, h := range l.Hosts {
			for _, r := range h.Rules {
				if gp.outboundFor(m, r).call.Fault != nil {
					return true
				}
			}
		}
	}
	return false
}

// calls returns the key of the failure handling of the gateway's calls
// by each rule of its HTTP and HTTPS listeners (the Inputs' part of it).
func (gp gatewayProxyPlan) calls(m Mesh) []string {
	var out []string
	for _, l := range gp.info.Listeners {
		if isL4(l.Protocol) {
			continue
		}
		for _, h := range l.Hosts {
			for _, r := range h.Rules {
				out = append(out, gp.outboundFor(m, r).callKey)
			}
		}
	}
	return out
}

// ports returns the Gateway's ports, each with its listeners.
func (gp gatewayProxyPlan) ports() [][]gateway.Listener {
	var out [][]gateway.Listener
	for _, l := range gp.info.Listeners { // sorted by port
		if n := len(out); n > 0 && out[n-1][0].Port == l.Port {
			out[n-1] = append(out[n-1], l)
			continue
		}
		out = append(out, []gateway.Listener{l})
	}
	return out
}

func (gp gatewayProxyPlan) routeName(l gateway.Listener) string {
	name := GatewayListenerName(gp.info.Gateway, l.Port)
	if l.Protocol == "HTTPS" {
		name += "|" + l.Name
	}
	return name
}

func gatewayListeners(m Mesh, p Proxy) ([]*listenerv3.Listener, error) {
	gp, err := planGateway(m, p)
	if err != nil {
		return nil, err
	}
	b := &builder{}
	var out []*listenerv3.Listener
	for _, ls := range gp.ports() {
		if isL4(ls[0].Protocol) {
			out = append(out, b.gatewayL4Listener(gp, p, ls))
			continue
		}
		name := GatewayListenerName(gp.info.Gateway, ls[0].Port)
		l := &listenerv3.Listener{Name: name, Address: socketAddress(p.Address, ls[0].Port), TrafficDirection: corev3.TrafficDirection_INBOUND}
		if ls[0].Protocol == "HTTP" {
			l.FilterChains = []*listenerv3.FilterChain{{Filters: []*listenerv3.Filter{b.networkFilter(hcmFilter, gatewayHCM(name, name, gp.faults(m, ls), b))}}}
		} else {
			l.ListenerFilters = []*listenerv3.ListenerFilter{{Name: tlsInspector,
				ConfigType: &listenerv3.ListenerFilter_TypedConfig{TypedConfig: b.any(&tlsinspectorv3.TlsInspector{})}}}
			for _, gl := range ls {
				if slices.Contains(p.UnusableCertificates, gl.Name) {
					continue
				}
				fc := &listenerv3.FilterChain{
					Name:            gl.Name,
					Filters:         []*listenerv3.Filter{b.networkFilter(hcmFilter, gatewayHCM(name+"|"+gl.Name, gp.routeName(gl), gp.faults(m, []gateway.Listener{gl}), b))},
					TransportSocket: b.transportSocket(gatewayTLS(p.GatewayCertDir, gl.Certificate)),
				}
				if gl.Hostname != "" {
					fc.FilterChainMatch = &listenerv3.FilterChainMatch{ServerNames: []string{gl.Hostname}}
				}
				l.FilterChains = append(l.FilterChains, fc)
			}
			if len(l.FilterChains) == 0 {
				continue // every listener of the port lacks its certificate
			}
		}
		out = append(out, l)
	}
	if b.err != nil {
		return nil, b.err
	}
	return out, nil
}

// gatewayHCM is an edge HTTP connection manager, as Envoy's edge proxy
// guide advises: the client's address is the peer's (no X-Forwarded-For
// is trusted); paths are normalised before matching (dot segments, merged
// slashes, escaped slashes unescaped and redirected); headers with
// underscores are refused; idle connections and slow request headers
// time out; HTTP/2 streams and windows are bounded. The Host header's
// port is ignored when matching virtual hosts. With fault, its routes
// inject faults: the fault filter (empty) comes before the router.
func gatewayHCM(statPrefix, routeName string, fault bool, b *builder) *hcmv3.HttpConnectionManager {
	h := rdsHCM(statPrefix, routeName, routerHTTPFilter)
	if fault {
		h.HttpFilters = []*hcmv3.HttpFilter{faultHTTPFilter, routerHTTPFilter}
	}
	h.UseRemoteAddress = wrapperspb.Bool(true)
	h.StripPortMode = &hcmv3.HttpConnectionManager_StripAnyHostPort{StripAnyHostPort: true}
	h.NormalizePath = wrapperspb.Bool(true)
	h.MergeSlashes = true
	h.PathWithEscapedSlashesAction = hcmv3.HttpConnectionManager_UNESCAPE_AND_REDIRECT
	h.RequestHeadersTimeout = durationpb.New(10 * time.Second)
	h.CommonHttpProtocolOptions = &corev3.HttpProtocolOptions{
		IdleTimeout:                  durationpb.New(time.Hour),
		HeadersWithUnderscoresAction: corev3.HttpProtocolOptions_REJECT_REQUEST,
	}
	h.Http2ProtocolOptions = &corev3.Http2ProtocolOptions{
		MaxConcurrentStreams:        wrapperspb.UInt32(100),
		InitialStreamWindowSize:     wrapperspb.UInt32(64 << 10),
		InitialConnectionWindowSize: wrapperspb.UInt32(1 << 20),
	}
	return h
}

// GatewayCertFiles returns the PEM files of the certificate a listener's
// certificateRef (Secret ns/name) names on a gateway machine whose
// certificate directory is dir ("": spec.GatewayCertDir).
func GatewayCertFiles(dir string, secret mesh.MeshService) (chain, key string) {
	if dir == "" {
		dir = spec.GatewayCertDir
	}
	d := path.Join(dir, secret.Namespace, secret.Name)
	return path.Join(d, "tls.crt"), path.Join(d, "tls.key")
}

// gatewayTLS terminates the clients' TLS with the listener's certificate
// files, reloaded by Envoy when the directory changes. Clients present no
// certificate: they are outside the mesh.
func gatewayTLS(dir string, secret mesh.MeshService) *tlsv3.DownstreamTlsContext {
	chain, key := GatewayCertFiles(dir, secret)
	return &tlsv3.DownstreamTlsContext{CommonTlsContext: &tlsv3.CommonTlsContext{
		TlsCertificates: []*tlsv3.TlsCertificate{{
			CertificateChain: &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: chain}},
			PrivateKey:       &corev3.DataSource{Specifier: &corev3.DataSource_Filename{Filename: key}},
			WatchedDirectory: &corev3.WatchedDirectory{Path: path.Dir(chain)},
		}},
		AlpnProtocols: alpn,
	}}
}

func gatewayRoutes(m Mesh, p Proxy) ([]*routev3.RouteConfiguration, error) {
	gp, err := planGateway(m, p)
	if err != nil {
		return nil, err
	}
	var out []*routev3.RouteConfiguration
	for _, ls := range gp.ports() {
		if isL4(ls[0].Protocol) {
			continue // no RDS: see gateway_l4.go
		}
		if ls[0].Protocol == "HTTP" {
			out = append(out, gp.routeConfig(m, gp.routeName(ls[0]), ls))
			continue
		}
		for _, l := range ls {
			out = append(out, gp.routeConfig(m, gp.routeName(l), []gateway.Listener{l}))
		}
	}
	sortByName(out, (*routev3.RouteConfiguration).GetName)
	return out, nil
}

// routeConfig renders a virtual host per host name of the listeners (the
// rules of listeners sharing a host name merged, in precedence order).
func (gp gatewayProxyPlan) routeConfig(m Mesh, name string, ls []gateway.Listener) *routev3.RouteConfiguration {
	rc := &routev3.RouteConfiguration{Name: name}
	var hosts []gateway.Host
	for _, l := range ls {
		for _, h := range l.Hosts {
			if i := slices.IndexFunc(hosts, func(x gateway.Host) bool { return x.Hostname == h.Hostname }); i >= 0 {
				hosts[i].Rules = slices.Concat(hosts[i].Rules, h.Rules)
				continue
			}
			hosts = append(hosts, gateway.Host{Hostname: h.Hostname, Rules: h.Rules})
		}
	}
	for _, h := range hosts {
		vh := &routev3.VirtualHost{Name: h.Hostname, Domains: []string{h.Hostname}}
		// A request for this host name also matches the routes of the
		// wildcards that cover it, after its own (the Gateway API's
		// precedence: the most specific host name first).
		rules := gateway.SortRules(h.Rules)
		for _, o := range hosts {
			if o.Hostname != h.Hostname && hostCovers(o.Hostname, h.Hostname) {
				rules = append(rules, gateway.SortRules(o.Rules)...)
			}
		}
		for _, r := range rules {
			if rt := gatewayRoute(gp.outboundFor(m, r), r, Envoy); rt != nil {
				vh.Routes = append(vh.Routes, rt)
			}
		}
		rc.VirtualHosts = append(rc.VirtualHosts, vh)
	}
	return rc
}

func gatewayClusters(m Mesh, p Proxy) ([]*clusterv3.Cluster, error) {
	gp, err := planGateway(m, p)
	if err != nil {
		return nil, err
	}
	b := &builder{}
	var out []*clusterv3.Cluster
	for _, svc := range gp.allowed {
		info, _ := m.Spec().Service(svc)
		out = append(out, memoised(m, b, memoKey{kind: memoCluster, svc: svc, flavor: Envoy}, func() *clusterv3.Cluster {
			return b.edsCluster(m, info, Envoy, clusterPolicyOf(m.Spec().ServiceResilience(svc), Envoy))
		}))
	}
	if gp.hasL4() {
		out = append(out, gatewayRefuseCluster())
		sortByName(out, (*clusterv3.Cluster).GetName)
	}
	if b.err != nil {
		return nil, b.err
	}
	return out, nil
}

// gatewayInputs is what a gateway proxy's resources are rendered from.
func gatewayInputs(m Mesh, p Proxy) (Inputs, error) {
	gp, err := planGateway(m, p)
	if err != nil {
		return Inputs{}, err
	}
	in := Inputs{self: spec.ServiceInfo{Service: p.Service, ServiceAccount: gp.info.ServiceAccount}, gateway: gp.info.Fingerprint}
	for _, svc := range gp.allowed {
		info, _ := m.Spec().Service(svc)
		in.upstreams = append(in.upstreams, info)
	}
	in.policies = upstreamPolicies(m, gp.allowed)
	in.calls = gp.calls(m)
	return in, nil
}

func errNoGateway(p Proxy) error {
	return fmt.Errorf("render: gateway proxy of %s: no Gateway %q in namespace %q in the mesh specification: apply one (gatewayClassName: %s), or enroll the machine with the Gateway's namespace/name (an egress gateway's machine: apply its EgressGateway)", p.Service, p.Service.Name, p.Service.Namespace, spec.GatewayClassName)
}

// gatewayFileCert reports whether c is a gateway listener's: certificates
// from the files tls.crt and tls.key of one absolute directory (the
// machine's certificate directory, see GatewayCertFiles), no client
// certificate checked.
func gatewayFileCert(c *tlsv3.CommonTlsContext) bool {
	if len(c.GetTlsCertificates()) == 0 || c.GetValidationContextType() != nil {
		return false
	}
	for _, tc := range c.GetTlsCertificates() {
		chain, key := tc.GetCertificateChain().GetFilename(), tc.GetPrivateKey().GetFilename()
		if !path.IsAbs(chain) || path.Base(chain) != "tls.crt" || path.Base(key) != "tls.key" || path.Dir(chain) != path.Dir(key) {
			return false
		}
	}
	return true
}

// hostCovers reports whether the wildcard w ("*", "*.example.com") covers
// the host name h (precise or a narrower wildcard).
func hostCovers(w, h string) bool {
	if w == "*" {
		return true
	}
	rest, ok := strings.CutPrefix(w, "*")
	return ok && strings.HasSuffix(h, rest) && len(h) > len(rest)
}
