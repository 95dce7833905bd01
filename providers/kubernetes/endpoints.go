package main

import (
	"cmp"
	"maps"
	"net/netip"
	"slices"
	"strconv"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"

	"github.com/osm-vm/osm-vm/provider"
)

// Labels the provider puts on endpoints.
const (
	labelNamespace   = "k8s-namespace"   // the Kubernetes namespace of the Service
	labelPod         = "k8s-pod"         // the pod behind the address (from targetRef)
	labelPortName    = "port-name"       // the Service port's name, when it has one
	labelServicePort = "service-port"    // the Service port number the endpoint serves
	labelZone        = "zone"            // the endpoint's zone
	labelNode        = "node"            // the node the pod runs on
	labelTerminating = "k8s-terminating" // "true" on terminating endpoints kept as a fallback
)

// serviceEndpoints returns the mesh endpoints of one Kubernetes Service from
// its EndpointSlices (every slice labelled kubernetes.io/service-name with
// the Service's name, in its namespace).
//
// The mesh models a service as ip:port endpoints, so a Service with several
// ports gives one endpoint per address per port, labelled with the port's
// name. Each Service port is matched to the slice port of the same name and
// protocol; the slice's port number is the resolved target port (named
// target ports resolve per pod, which is why the EndpointSlice controller
// groups pods by port number into slices).
//
// Readiness follows kube-proxy: an endpoint is used when its ready
// condition is true or unset. Only when a port has no ready endpoint at all
// are terminating endpoints that are still serving used (labelled
// k8s-terminating=true), so connections drain instead of failing. Not-ready
// and terminating-not-serving endpoints are left out.
//
// Only the first address of an endpoint counts (the API defines no meaning
// for others), FQDN slices and non-TCP ports are skipped (the mesh carries
// TCP), and ExternalName Services have no endpoints.
func serviceEndpoints(svc *corev1.Service, slicesOfSvc []*discoveryv1.EndpointSlice) []provider.Endpoint {
	if svc.Spec.Type == corev1.ServiceTypeExternalName {
		return nil
	}
	var out []provider.Endpoint
	for _, sp := range svc.Spec.Ports {
		if proto := cmp.Or(sp.Protocol, corev1.ProtocolTCP); proto != corev1.ProtocolTCP {
			continue
		}
		var ready, fallback []provider.Endpoint
		for _, slice := range slicesOfSvc {
			if slice.AddressType != discoveryv1.AddressTypeIPv4 && slice.AddressType != discoveryv1.AddressTypeIPv6 {
				continue
			}
			port, ok := slicePort(slice, sp.Name)
			if !ok {
				continue
			}
			for _, e := range slice.Endpoints {
				if len(e.Addresses) == 0 {
					continue
				}
				ip, err := netip.ParseAddr(e.Addresses[0])
				if err != nil || ip.Zone() != "" {
					continue
				}
				ep := provider.Endpoint{IP: ip, Port: port, Labels: endpointLabels(svc, sp, e)}
				isReady := e.Conditions.Ready == nil || *e.Conditions.Ready
				terminating := e.Conditions.Terminating != nil && *e.Conditions.Terminating
				serving := e.Conditions.Serving == nil || *e.Conditions.Serving
				switch {
				case isReady:
					ready = append(ready, ep)
				case terminating && serving:
					ep.Labels[labelTerminating] = "true"
					fallback = append(fallback, ep)
				}
			}
		}
		if len(ready) > 0 {
			out = append(out, ready...)
		} else {
			out = append(out, fallback...)
		}
	}
	return out
}

// slicePort returns the port number a slice gives the Service port named
// name ("" for an unnamed port), TCP only.
func slicePort(slice *discoveryv1.EndpointSlice, name string) (uint16, bool) {
	for _, p := range slice.Ports {
		if p.Port == nil || *p.Port < 1 || *p.Port > 65535 {
			continue
		}
		if p.Protocol != nil && *p.Protocol != corev1.ProtocolTCP {
			continue
		}
		pname := ""
		if p.Name != nil {
			pname = *p.Name
		}
		if pname == name {
			return uint16(*p.Port), true
		}
	}
	return 0, false
}

func endpointLabels(svc *corev1.Service, sp corev1.ServicePort, e discoveryv1.Endpoint) map[string]string {
	l := map[string]string{
		labelNamespace:   svc.Namespace,
		labelServicePort: strconv.Itoa(int(sp.Port)),
	}
	if sp.Name != "" {
		l[labelPortName] = sp.Name
	}
	if e.TargetRef != nil && e.TargetRef.Kind == "Pod" && e.TargetRef.Name != "" {
		l[labelPod] = e.TargetRef.Name
	}
	if e.Zone != nil && *e.Zone != "" {
		l[labelZone] = *e.Zone
	}
	if e.NodeName != nil && *e.NodeName != "" {
		l[labelNode] = *e.NodeName
	}
	return l
}

// mergeEndpoints joins the endpoints of every Kubernetes Service that maps
// to one mesh service and de-duplicates them by ip:port (a pod can sit in
// two slices while the controller moves it, and two Service ports can share
// a target port). Of duplicates it keeps a ready one over a terminating
// one, then the smallest port name and namespace, so the result does not
// depend on informer order. The result is sorted by address and port.
func mergeEndpoints(lists ...[]provider.Endpoint) []provider.Endpoint {
	byAddr := map[netip.AddrPort]provider.Endpoint{}
	for _, list := range lists {
		for _, ep := range list {
			key := netip.AddrPortFrom(ep.IP, ep.Port)
			if old, ok := byAddr[key]; !ok || preferred(ep, old) {
				byAddr[key] = ep
			}
		}
	}
	out := slices.Collect(maps.Values(byAddr))
	slices.SortFunc(out, func(a, b provider.Endpoint) int {
		return netip.AddrPortFrom(a.IP, a.Port).Compare(netip.AddrPortFrom(b.IP, b.Port))
	})
	return out
}

// preferred reports whether a should be kept over b for the same ip:port.
func preferred(a, b provider.Endpoint) bool {
	at, bt := a.Labels[labelTerminating] != "", b.Labels[labelTerminating] != ""
	if at != bt {
		return !at
	}
	if c := cmp.Compare(a.Labels[labelPortName], b.Labels[labelPortName]); c != 0 {
		return c < 0
	}
	return a.Labels[labelNamespace] < b.Labels[labelNamespace]
}
