package spec

import (
	"fmt"
	"iter"

	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec/gateway"
)

// ControllerName is the controllerName of the route status osm-server
// reports for a route's Service parents.
const ControllerName = gateway.MeshControllerName

// route is a route document (HTTPRoute, GRPCRoute, the Gateway API's
// TCPRoute, TLSRoute) as package gateway resolves it.
type route interface {
	Object
	gatewayRoute() gateway.Route
}

func (r *HTTPRoute) gatewayRoute() gateway.Route {
	return gateway.Route{Name: gateway.RouteName(r.Key()), HTTP: &r.Spec}
}

func (r *GRPCRoute) gatewayRoute() gateway.Route {
	return gateway.Route{Name: gateway.RouteName(r.Key()), GRPC: &r.Spec}
}

func (r *GatewayTCPRoute) gatewayRoute() gateway.Route {
	return gateway.Route{Name: gateway.RouteName(r.Key()), TCP: &r.Spec}
}

func (r *TLSRoute) gatewayRoute() gateway.Route {
	return gateway.Route{Name: gateway.RouteName(r.Key()), TLS: &r.Spec}
}

// world is the specification as the Gateway API's resolution sees it
// (gateway.World).
type world struct {
	st *state
	// splitRoot, when set, is a snapshot's index of TrafficSplits by root;
	// without it SplitOf looks through the documents.
	splitRoot map[mesh.MeshService]Key
}

func (w world) ServicePorts(svc mesh.MeshService) ([]gateway.Port, bool) {
	s, ok := serviceOf(w.st.objects[serviceKey(svc)])
	if !ok {
		return nil, false
	}
	out := make([]gateway.Port, len(s.Spec.Ports))
	for i, p := range s.Spec.Ports {
		out[i] = gateway.Port{Name: p.Name, Port: p.Port, AppProtocol: p.AppProtocol}
	}
	return out, true
}

func (w world) ServiceHint(svc mesh.MeshService) string {
	return didYouMean(svc.Name, namesOfKind(w.st, KindService, svc.Namespace))
}

func (w world) Gateway(gw mesh.MeshService) (*gwv1.GatewaySpec, bool) {
	g, ok := gatewayOf(w.st, gw)
	if !ok {
		return nil, false
	}
	return &g.Spec, true
}

func (w world) ReferenceGrants(ns string) iter.Seq[*gwv1.ReferenceGrantSpec] {
	return func(yield func(*gwv1.ReferenceGrantSpec) bool) {
		for k, o := range w.st.objects {
			if g, ok := o.(*ReferenceGrant); ok && k.Namespace == ns && !yield(&g.Spec) {
				return
			}
		}
	}
}

func (w world) SplitOf(svc mesh.MeshService) (string, bool) {
	if w.splitRoot != nil {
		k, ok := w.splitRoot[svc]
		return k.String(), ok
	}
	k, ok := splitOf(w.st, svc)
	return k.String(), ok
}

func (w world) Routes() iter.Seq[gateway.Route] {
	return func(yield func(gateway.Route) bool) {
		for _, k := range sortedObjectKeys(w.st.objects) {
			if r, ok := w.st.objects[k].(route); ok && !yield(r.gatewayRoute()) {
				return
			}
		}
	}
}

// gatewayOf returns the Gateway named ns/name.
func gatewayOf(st *state, gw mesh.MeshService) (*Gateway, bool) {
	g, ok := st.objects[Key{Kind: KindGateway, Namespace: gw.Namespace, Name: gw.Name}].(*Gateway)
	return g, ok
}

// splitOf returns the TrafficSplit whose root is svc.
func splitOf(st *state, svc mesh.MeshService) (Key, bool) {
	for _, k := range sortedObjectKeys(st.objects) {
		if ts, ok := st.objects[k].(*TrafficSplit); ok && k.Namespace == svc.Namespace && ts.Spec.Service == svc.Name {
			return k, true
		}
	}
	return Key{}, false
}

// routeOf returns a route attached to svc.
func routeOf(st *state, svc mesh.MeshService) (Key, bool) {
	for _, k := range sortedObjectKeys(st.objects) {
		if r, ok := st.objects[k].(route); ok && gateway.IsParent(r.gatewayRoute(), svc) {
			return k, true
		}
	}
	return Key{}, false
}

// gatewayReferences checks a document of the batch against the state it
// is applied into: a route's parents and backends resolve (package
// gateway), no Service shares an identity with a Gateway, and no Service
// is both the root of an SMI TrafficSplit and the parent of a route.
func gatewayReferences(v *validator, st *state, obj Object) {
	if svc, ok := serviceOf(obj); ok {
		k := svc.Key()
		if _, ok := gatewayOf(st, mesh.MeshService{Namespace: k.Namespace, Name: k.Name}); ok {
			v.errorf("metadata.name", "a Gateway %q is in namespace %q: its machines enroll as the service of its name, so the two would share an identity; give the Service another name", k.Name, k.Namespace)
		}
		if sa := svc.Spec.ServiceAccount; sa != "" && sa != k.Name {
			if _, ok := gatewayOf(st, mesh.MeshService{Namespace: k.Namespace, Name: sa}); ok {
				v.errorf("spec.serviceAccount", "a Gateway %q is in namespace %q: its machines hold the certificate of service account %q, so the Service's machines would share the gateway's identity; run the Service as another service account", sa, k.Namespace, sa)
			}
		}
	}
	switch o := obj.(type) {
	case route:
		gateway.CheckReferences(v, world{st: st}, o.gatewayRoute())
	case *Gateway:
		if _, ok := serviceOf(st.objects[serviceKey(mesh.MeshService{Namespace: o.Metadata.Namespace, Name: o.Metadata.Name})]); ok {
			v.errorf("metadata.name", "a Service %q is in namespace %q: a Gateway's machines enroll as the service of its name, so the two would share an identity; give the Gateway another name", o.Metadata.Name, o.Metadata.Namespace)
		}
		for _, k := range sortedObjectKeys(st.objects) {
			if svc, ok := serviceOf(st.objects[k]); ok && k.Namespace == o.Metadata.Namespace && svc.Metadata.Name != o.Metadata.Name && svc.Spec.ServiceAccount == o.Metadata.Name {
				v.errorf("metadata.name", "Service %s/%s runs as service account %q: a Gateway's machines hold the certificate of the account of its name, so the two would share an identity; give the Gateway another name", k.Namespace, k.Name, o.Metadata.Name)
			}
		}
	case *TrafficSplit:
		root := mesh.MeshService{Namespace: o.Metadata.Namespace, Name: o.Spec.Service}
		if k, ok := routeOf(st, root); ok {
			v.errorf("spec.service", "Service %s is the parent of %s: a Service's calls are routed by TrafficSplit or by Gateway API routes, not both; delete the route or the TrafficSplit", root, k)
		}
	}
}

// gatewayDeleteConflict refuses to delete a Service a route still sends
// calls to, or a ReferenceGrant a route relies on, unless the route goes
// in the same batch.
func gatewayDeleteConflict(st *state, gone map[Key]bool) error {
	after := st.clone()
	for k := range gone {
		delete(after.objects, k)
	}
	after.reindex()
	for _, k := range sortedObjectKeys(st.objects) {
		o, ok := st.objects[k].(route)
		if !ok || gone[k] {
			continue
		}
		r := o.gatewayRoute()
		was := gateway.ResolveParents(world{st: st}, r)
		for i, a := range gateway.ResolveParents(world{st: after}, r) {
			if a.Reason != "" && was[i].Reason == "" {
				return fmt.Errorf("%w: %s is attached to it (spec.parentRefs[%d]: %s): delete or change the route first, or in the same batch", ErrConflict, k, i, a.Message)
			}
		}
		before := map[string]bool{}
		for _, p := range gateway.ResolveBackends(world{st: st}, r) {
			before[p.Field] = true
		}
		for _, p := range gateway.ResolveBackends(world{st: after}, r) {
			if !before[p.Field] {
				return fmt.Errorf("%w: %s still refers to it (%s: %s): delete or change the route first, or in the same batch", ErrConflict, k, p.Field, p.Message)
			}
		}
	}
	return nil
}

// withRouteStatus fills the status of a copy for responses.
func withRouteStatus(st *state, o Object) {
	w := world{st: st}
	switch r := o.(type) {
	case *HTTPRoute:
		r.Status = gateway.RouteStatus(w, r.gatewayRoute())
	case *GRPCRoute:
		r.Status = gateway.RouteStatus(w, r.gatewayRoute())
	case *GatewayTCPRoute:
		r.Status = gateway.RouteStatus(w, r.gatewayRoute())
	case *TLSRoute:
		r.Status = gateway.RouteStatus(w, r.gatewayRoute())
	case *Gateway:
		r.Status = gateway.GatewayStatus(w, mesh.MeshService{Namespace: r.Metadata.Namespace, Name: r.Metadata.Name}, &r.Spec)
	}
}

// gatewayIndex indexes the routes and Gateways of a snapshot.
func (s *Snapshot) gatewayIndex() *gateway.Index {
	var routes []gateway.Route
	var gws []mesh.MeshService
	for _, k := range s.keys {
		switch o := s.st.objects[k].(type) {
		case route:
			routes = append(routes, o.gatewayRoute())
		case *Gateway:
			gws = append(gws, mesh.MeshService{Namespace: k.Namespace, Name: k.Name})
		}
	}
	return gateway.NewIndex(world{st: s.st, splitRoot: s.splitRoot}, routes, gws)
}

// HasGatewayRoutes reports whether any route is attached to svc (for any
// caller).
func (s *Snapshot) HasGatewayRoutes(svc mesh.MeshService) bool { return s.gateway.HasRoutes(svc) }

// GatewayRoutes returns how routes route calls from callers in namespace
// callerNS to port of svc (gateway.Index.Routes).
func (s *Snapshot) GatewayRoutes(svc mesh.MeshService, port int, callerNS string) (gateway.Routes, bool) {
	return s.gateway.Routes(svc, port, callerNS)
}

// Gateway returns the Gateway named gw with its attached routes.
func (s *Snapshot) Gateway(gw mesh.MeshService) (gateway.Info, bool) { return s.gateway.Gateway(gw) }

// Gateways returns every Gateway with its attached routes, by namespace
// and name.
func (s *Snapshot) Gateways() []gateway.Info { return s.gateway.Gateways() }
