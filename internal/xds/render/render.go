// Package render turns the mesh (a catalog.View: the specification
// snapshot, the participant endpoints of each service and the trust domain)
// into the xDS resources one proxy receives: listeners, routes, clusters,
// endpoints and secrets. It is pure: no I/O, no globals, no serving. The xDS server (internal/xds) calls it and
// publishes the result through internal/xds/cache after [Validate] passes.
//
// It reads one [catalog.View] as a plain value and calls back into nothing.
// It imports only internal/mesh, internal/spec and internal/catalog (for
// the View; and Envoy's and gRPC's protos); it must not import the store,
// the cache or anything that does I/O.
//
// # Flavours
//
// [Envoy] output is for the Envoy sidecar the agent runs: inbound listeners
// on the VM's address, outbound listeners on each allowed upstream's virtual
// IP, TLS material by SDS, and a STATIC cluster for the local application.
// [GRPC] output is for proxyless gRPC (gRPC's xDS resolver and xDS-enabled
// servers): API listeners named <service>.<namespace>.mesh:<port>, server
// listeners named [GRPCServerListenerName], TLS from the certificate provider
// instance named "osm" in the gRPC bootstrap (gRPC has no SDS), only EDS
// clusters, the router filter last, and ADS config sources.
// [Gateway] output is for the Envoy of an ingress gateway machine, enrolled
// as a spec.Gateway's namespace and name: listeners per Gateway port on its
// address, routes from the routes attached, EDS clusters to the backends
// (gateway_proxy.go); or of an egress gateway machine, enrolled as a
// spec.EgressGateway's: a listener on its address with a filter chain per
// external host and port, dynamic forward proxy clusters whose DNS cache
// drops internal addresses (egress_gateway.go).
//
// # Resource names
//
// Resources are named after what they contain, so every resource that does
// not depend on the individual proxy is byte-identical for every proxy that
// receives it and the cache marshals it once:
//
//	EDS     <ns>/<svc>                         ClusterLoadAssignment of a service (both flavours)
//	CDS     <ns>/<svc>                         Envoy EDS cluster of an upstream service
//	        <ns>/<svc>|grpc                    gRPC EDS cluster (EDS service_name <ns>/<svc>)
//	        local|<ns>/<svc>|<port>            Envoy STATIC cluster 127.0.0.1:<targetPort> of the proxy's own service
//	RDS     outbound|<ns>/<svc>|<port>[|to=<ns>/<b1>,<ns>/<b2>][|split-only][|grpc]
//	                                           routes to an upstream; "to=" lists the split backends
//	                                           when the caller may reach only some of them;
//	                                           "split-only" when the split has matches and the
//	                                           caller may not call the root itself
//	        outbound|<ns>/<svc>|<port>|gw[=<consumer ns>][|to=...][|grpc]
//	                                           Gateway API routes of the port (gateway.go)
//	        inbound|<ns>/<svc>|<port>          Envoy: routes to the local cluster
//	LDS     outbound|... (as its RDS name)     Envoy listener on <VIP>:<port>
//	        inbound|<ns>/<svc>|<port>          Envoy listener on <proxy address>:<port> (the only
//	                                           resource that depends on the proxy's address)
//	        <svc>.<ns>.mesh:<port>             gRPC API listener
//	        grpc/server?xds.resource.listening_address=<ip>:<port>
//	                                           gRPC server listener (depends on the address)
//	SDS     service-cert                       the proxy's own service certificate and key
//	        root-ca                            the mesh CA
//
// The SDS name of a proxy's own certificate is the same for every service so
// that clusters (which reference it) are shared by all callers of an
// upstream; its content is per service, identical for all proxies of one
// service. Certificate rotation changes the secrets' content, never a name,
// so it reaches Envoy by SDS without draining listeners.
//
// Every name depends on the specification snapshot only, except EDS content,
// which depends on the endpoints of the service it is named after:
// [Dependencies] lists the services whose endpoint changes affect a proxy.
//
// # Policy
//
// In SMI mode a proxy gets outbound listeners, routes and clusters only for
// the services spec.Snapshot.Upstreams allows its service account to call,
// and split backends only when it may call that backend. A service's inbound
// RBAC allows the SPIFFE IDs of the allowed source accounts, per port,
// restricted to the TrafficTarget's HTTPRouteGroup matches (RE2 path regex,
// :method, headers) on HTTP and gRPC ports and to its TCPRoute ports on TCP
// ports; no policy means deny. Outbound routes do not repeat the
// HTTPRouteGroup restrictions (the destination enforces them, and repeating
// them would make each upstream's routes differ per caller); they use only
// the TrafficSplit's matches and weights. A split's root that has no
// participant endpoints of its own (its machines enrolled as the backends)
// sends all its traffic, matched or not, to the backends, and a backend
// without endpoints takes no share while another has some: so routes
// depend on whether those services have endpoints (the Memo and
// [InputsOf] account for it), not on the endpoints themselves. In permissive mode any peer with a
// certificate from the mesh's trust domain is allowed.
package render

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// Flavor selects the kind of xDS client the output is for.
type Flavor int

const (
	// Envoy is the Envoy sidecar: SDS, STATIC local clusters, VIP listeners.
	Envoy Flavor = iota
	// GRPC is proxyless gRPC: certificate provider instances, API
	// listeners, EDS clusters only.
	GRPC
	// Gateway is the Envoy of an ingress gateway machine, enrolled as a
	// Gateway's service (see gateway_proxy.go): Envoy's resources, with
	// listeners from the Gateway's.
	Gateway
)

// String returns "envoy" or "grpc".
func (f Flavor) String() string {
	switch f {
	case Envoy:
		return "envoy"
	case GRPC:
		return "grpc"
	case Gateway:
		return "gateway"
	}
	return "flavor(" + strconv.Itoa(int(f)) + ")"
}

// MarshalText makes JSON (the debug API) show the flavour's name.
func (f Flavor) MarshalText() ([]byte, error) { return []byte(f.String()), nil }

// Names of the SDS secrets and the gRPC certificate provider instance.
const (
	ServiceCertSecret = "service-cert"
	RootCASecret      = "root-ca"
	// CertProviderInstance is the certificate_providers entry the agent
	// writes into the gRPC bootstrap (file_watcher plugin holding the
	// service certificate, its key and the mesh CA).
	CertProviderInstance = "osm"
	// GRPCServerListenerTemplate is the server_listener_resource_name_template
	// of the gRPC bootstraps the agent writes.
	GRPCServerListenerTemplate = "grpc/server?xds.resource.listening_address=%s"
)

// Mesh is everything rendering reads: the mesh catalog's view (the
// specification snapshot, each service's participant endpoints, already
// filtered by the participant rule, and the trust domain; rendering never
// decides who participates) and an optional Memo.
type Mesh struct {
	*catalog.View
	// Memo, when set, shares what rendering builds between the proxies
	// rendered from this View's specification and trust domain (see
	// [Memo]). Optional: the output is the same without it.
	Memo *Memo
}

// Proxy is the client the resources are for.
type Proxy struct {
	Service mesh.MeshService
	Flavor  Flavor
	// Address is the VM's advertise address: inbound (and gRPC server)
	// listeners bind it, since 0.0.0.0 would clash with the VIP listeners
	// on the same port.
	Address netip.Addr
	// GatewayCertDir is where a gateway proxy's machine keeps the
	// certificate files of the Gateway's HTTPS listeners (node metadata
	// osm.gatewayCertDir); empty: spec.GatewayCertDir.
	GatewayCertDir string
	// UnusableCertificates are the Gateway listeners whose certificate
	// files the gateway machine's agent reported missing or unusable:
	// they are rendered without them, so Envoy does not reject the port's
	// listener (and with it the port's other Gateway listeners).
	UnusableCertificates []string
}

// EDSName is the EDS resource name of svc's endpoints (both flavours).
func EDSName(svc mesh.MeshService) string { return svc.String() }

// ClusterName is the name of the cluster for calls to svc.
func ClusterName(svc mesh.MeshService, f Flavor) string { return clusterName(EDSName(svc), f) }

// clusterName is the cluster name of the service whose EDS name is eds.
func clusterName(eds string, f Flavor) string {
	if f == GRPC {
		return eds + "|grpc"
	}
	return eds
}

// LocalClusterName is the Envoy cluster for the local application behind
// svc's port.
func LocalClusterName(svc mesh.MeshService, port int) string {
	return "local|" + svc.String() + "|" + strconv.Itoa(port)
}

// InboundName names the inbound listener and route configuration of svc's port.
func InboundName(svc mesh.MeshService, port int) string {
	return "inbound|" + svc.String() + "|" + strconv.Itoa(port)
}

// GRPCServerListenerName is the listener name a gRPC xDS server on addr
// asks for (GRPCServerListenerTemplate applied to ip:port).
func GRPCServerListenerName(addr netip.AddrPort) string {
	return fmt.Sprintf(GRPCServerListenerTemplate, addr.String())
}

// PerProxy reports whether the listener named name depends on the
// individual proxy (its address): the inbound listeners of Envoy and the
// server listeners of gRPC. Every other resource is the same for all
// proxies of one service and flavour.
func PerProxy(name string) bool {
	return strings.HasPrefix(name, "inbound|") || strings.HasPrefix(name, "gateway|") || strings.HasPrefix(name, strings.SplitN(GRPCServerListenerTemplate, "%s", 2)[0])
}

// APIListenerName is the gRPC API listener of svc's port: the host and
// port of the target xds:///<svc>.<ns>.mesh:<port>.
func APIListenerName(info spec.ServiceInfo, port int) string {
	return info.Hostname() + ":" + strconv.Itoa(port)
}

func (m Mesh) check(p Proxy) (spec.ServiceInfo, error) {
	if m.Spec() == nil {
		return spec.ServiceInfo{}, fmt.Errorf("render: no mesh specification snapshot")
	}
	if m.TrustDomain() == "" {
		return spec.ServiceInfo{}, fmt.Errorf("render: empty trust domain: set the mesh trust domain (e.g. osm.local)")
	}
	if p.Flavor != Envoy && p.Flavor != GRPC && p.Flavor != Gateway {
		return spec.ServiceInfo{}, fmt.Errorf("render: proxy of %s: unknown flavor %d", p.Service, p.Flavor)
	}
	if gw, ok := egressGatewayOf(m, p); ok {
		if !p.Address.IsValid() {
			return spec.ServiceInfo{}, fmt.Errorf("render: egress gateway proxy of %s: no address: its listener binds the machine's advertise address", p.Service)
		}
		return spec.ServiceInfo{Service: p.Service, ServiceAccount: gw.ServiceAccount}, nil
	}
	if p.Flavor == Gateway {
		g, ok := m.Spec().Gateway(p.Service)
		if !ok {
			return spec.ServiceInfo{}, errNoGateway(p)
		}
		if !p.Address.IsValid() {
			return spec.ServiceInfo{}, fmt.Errorf("render: gateway proxy of %s: no address: its listeners bind the machine's advertise address", p.Service)
		}
		return spec.ServiceInfo{Service: p.Service, ServiceAccount: g.ServiceAccount}, nil
	}
	info, ok := m.Spec().Service(p.Service)
	if !ok {
		return spec.ServiceInfo{}, fmt.Errorf("render: proxy of %s: no Service %q in namespace %q in the mesh specification: apply one", p.Service, p.Service.Name, p.Service.Namespace)
	}
	if !p.Address.IsValid() {
		return spec.ServiceInfo{}, fmt.Errorf("render: proxy of %s: no address: inbound listeners need the VM's advertise address", p.Service)
	}
	return info, nil
}

// backend is one weighted target of an outbound route.
type backend struct {
	svc    mesh.MeshService
	weight uint32
}

// outbound is one upstream port the proxy may call.
type outbound struct {
	info spec.ServiceInfo
	port spec.ServicePort
	// direct is set when the upstream is called without a split.
	direct bool
	// split lists the allowed, non-zero split backends (sorted by
	// service); splitMatches limit the split to some requests, the others
	// going to the root directly (when direct is also set).
	split        []backend
	subset       bool
	splitMatches []spec.HTTPRouteMatch
	// gw is set when Gateway API routes decide the port's calls (then
	// direct and split are unset).
	gw *gatewayPlan
	// name is routeName's answer for the plan's flavour (gRPC when
	// grpcName), worked out once by buildPlan: every proxy of the plan's
	// service looks its upstreams' listeners and routes up by it.
	name     string
	grpcName bool
	// call is the caller's failure handling of its calls to the port
	// (see resilience_routes.go); callKey is what rendering takes from
	// it, retrySrc the Retry (<ns>/<name>) that names the caller, if one
	// governs its retry.
	call     resilience.Route
	callKey  string
	retrySrc string
}

func isHTTP(p spec.ServicePort) bool { return p.AppProtocol != "tcp" }

// routeName is the RDS (and Envoy outbound listener) name.
func (o outbound) routeName(f Flavor) string {
	if o.gw != nil {
		return o.gw.routeName(o, f)
	}
	if o.name != "" && o.grpcName == (f == GRPC) {
		return o.name
	}
	base := "outbound|" + o.info.Service.Namespace + "/" + o.info.Service.Name + "|" + strconv.Itoa(o.port.Port)
	if !o.subset && (len(o.splitMatches) == 0 || o.direct) && f != GRPC && o.retrySrc == "" {
		return base
	}
	var b strings.Builder
	b.WriteString(base)
	if o.subset {
		names := make([]string, len(o.split))
		for i, s := range o.split {
			names[i] = s.svc.String()
		}
		b.WriteString("|to=" + strings.Join(names, ","))
	}
	if len(o.splitMatches) > 0 && !o.direct {
		// Requests outside the split's matches have nowhere to go.
		b.WriteString("|split-only")
	}
	if o.retrySrc != "" {
		b.WriteString("|retry=" + o.retrySrc)
	}
	if f == GRPC {
		b.WriteString("|grpc")
	}
	return b.String()
}

// appendServices appends the services the outbound's routes send to.
func (o outbound) appendServices(out []mesh.MeshService) []mesh.MeshService {
	if o.gw != nil {
		return append(out, o.gw.allowed...)
	}
	if o.direct {
		out = append(out, o.info.Service)
	}
	for _, b := range o.split {
		out = append(out, b.svc)
	}
	return out
}

// plan returns the upstream ports the proxy's service may call, ordered by
// service and port. The gRPC flavour skips TCP ports. The result is shared
// through m.Memo and must not be modified.
func plan(m Mesh, p Proxy, self spec.ServiceInfo) []outbound {
	if m.Memo == nil {
		return buildPlan(m, p, self)
	}
	k := planKey{p.Service, p.Flavor}
	if out, ok := memoLookup(m.Memo, m, m.Memo.plans, k); ok {
		return out
	}
	return m.Memo.plans.Keep(k, buildPlan(m, p, self))
}

func buildPlan(m Mesh, p Proxy, self spec.ServiceInfo) []outbound {
	src := self.ServiceAccount
	upstreams := m.Spec().AllowedUpstreams(src)
	out := make([]outbound, 0, len(upstreams)) // one port each, mostly
	for _, up := range upstreams {
		svc := up.Service
		if svc == p.Service {
			continue
		}
		info, ok := m.Spec().Service(svc)
		if !ok {
			continue
		}
		base := outbound{info: info, direct: up.Allowed}
		if sp, ok := m.Spec().Split(svc); ok {
			total := 0
			for _, b := range sp.Backends {
				if b.Weight > 0 {
					total++
				}
				if b.Weight <= 0 || !m.Spec().Allows(src, b.Service) {
					continue
				}
				if _, ok := m.Spec().Service(b.Service); !ok {
					continue
				}
				base.split = append(base.split, backend{svc: b.Service, weight: uint32(b.Weight)})
			}
			slices.SortFunc(base.split, func(a, b backend) int { return a.svc.Compare(b.svc) })
			base.subset = len(base.split) < total
			base.split = servedBackends(m, base.split)
			if len(base.split) > 0 {
				base.splitMatches = sp.Matches
				// Without matches the split takes all traffic and the
				// root is not called directly. Nor is a root without
				// endpoints of its own (its machines enrolled as the
				// backends): its traffic, matched or not, goes to the
				// backends, so that gRPC clients (which never match
				// :method) and Envoy reach the same services.
				if len(sp.Matches) == 0 || m.noEndpoints(svc) {
					base.direct, base.splitMatches = false, nil
				}
			}
		}
		routed := m.Spec().HasGatewayRoutes(svc)
		if !base.direct && len(base.split) == 0 && !routed {
			continue
		}
		for _, port := range sortedPorts(info) {
			if p.Flavor == GRPC && !isHTTP(port) {
				continue
			}
			o := base
			o.port = port
			if isHTTP(port) {
				o.setCall(m.Spec().CallResilience(src, svc, port.Port))
			}
			if routed && gatewayPort(m, p, src, &o) {
				out = append(out, o)
				continue
			}
			if !o.direct && len(o.split) == 0 {
				continue // a port no route of a routed Service serves
			}
			if !isHTTP(port) && len(o.split) > 0 {
				// tcp_proxy cannot match requests: the split takes all.
				o.direct, o.splitMatches = false, nil
			}
			o.name, o.grpcName = o.routeName(p.Flavor), p.Flavor == GRPC
			out = append(out, o)
		}
	}
	return out
}

// servedBackends returns the split backends that have endpoints, or all
// of them when none has: a backend without endpoints takes no share of
// the split while another can answer.
func servedBackends(m Mesh, split []backend) []backend {
	served := slices.DeleteFunc(slices.Clone(split), func(b backend) bool { return m.noEndpoints(b.svc) })
	if len(served) == 0 {
		return split
	}
	return served
}

// noEndpoints reports whether svc has no participant endpoints in m's
// View. Plans depend on it (a split's root and backends), so the Memo
// records what it answered and forgets its plans when a later View
// answers otherwise.
func (m Mesh) noEndpoints(svc mesh.MeshService) bool {
	empty := len(m.Endpoints(svc)) == 0
	if m.Memo != nil {
		m.Memo.noteEmptiness(svc, empty)
	}
	return empty
}

// upstreamServices returns the sorted, distinct services the proxy's
// clusters and EDS resources are for.
func upstreamServices(outs []outbound) []mesh.MeshService {
	if len(outs) == 0 {
		return nil
	}
	svcs := make([]mesh.MeshService, 0, len(outs)) // one each, mostly
	for _, o := range outs {
		svcs = o.appendServices(svcs)
	}
	slices.SortFunc(svcs, mesh.MeshService.Compare)
	return slices.Compact(svcs)
}

// Dependencies returns the services whose endpoints the proxy receives (the
// EDS resources named EDSName(svc)), sorted. An endpoint change of any
// other service does not affect the proxy. Everything else the proxy
// receives depends on the specification snapshot, the trust domain, the
// proxy's address and (for SDS) its own service's certificate.
func Dependencies(m Mesh, p Proxy) ([]mesh.MeshService, error) {
	self, err := m.check(p)
	if err != nil {
		return nil, err
	}
	if _, ok := egressGatewayOf(m, p); ok {
		return nil, nil
	}
	if p.Flavor == Gateway {
		in, err := gatewayInputs(m, p)
		return in.Dependencies(), err
	}
	return egressGateways(upstreamServices(plan(m, p, self)), egressRoutes(m, p, self)), nil
}

// sortedPorts returns info's ports in port order: info.Ports itself when
// they are (mostly), so the result must not be modified.
func sortedPorts(info spec.ServiceInfo) []spec.ServicePort {
	byPort := func(a, b spec.ServicePort) int { return a.Port - b.Port }
	if slices.IsSortedFunc(info.Ports, byPort) {
		return info.Ports
	}
	ports := slices.Clone(info.Ports)
	slices.SortFunc(ports, byPort)
	return ports
}

func sortByName[T any](s []T, name func(T) string) {
	slices.SortFunc(s, func(a, b T) int { return strings.Compare(name(a), name(b)) })
}
