package main

import (
	"cmp"
	"fmt"
	"net/netip"
	"slices"
	"strings"

	"github.com/hashicorp/consul/api"

	"github.com/osm-vm/osm-vm/provider"
)

// Labels the provider puts on endpoints.
const (
	labelNode       = "node"              // the Consul node the instance runs on
	labelDatacenter = "datacenter"        // the node's datacenter
	labelService    = "consul-service"    // the Consul service name (differs from the mesh name under serviceMap)
	labelServiceID  = "consul-service-id" // the instance's service ID
	labelNamespace  = "consul-namespace"  // Enterprise only: the instance's namespace
	labelPartition  = "consul-partition"  // Enterprise only: the instance's admin partition
	labelTags       = "tags"              // the instance's tags, sorted, comma-separated
	labelMetaPrefix = "meta."             // one label per service meta key
	labelHealth     = "consul-health"     // "warning" on instances counted under includeWarning
)

// instance is one Consul service instance the provider can use: its
// endpoint and what identifies it for de-duplication.
type instance struct {
	node, id string
	ep       provider.Endpoint
}

// skipped says why an instance was left out; shown in the debug log.
type skipped struct {
	node, id, why string
}

// instances turns a health query's entries into endpoints: instances whose
// checks aggregate to passing (or warning, with includeWarning), with an
// IP address (the service address, else the node address) and a port.
// Entries the query filtered already (passing only) pass through the same
// check, so both modes agree.
func instances(entries []*api.ServiceEntry, includeWarning bool) ([]instance, []skipped) {
	var out []instance
	var skip []skipped
	for _, e := range entries {
		if e == nil || e.Service == nil || e.Node == nil {
			continue
		}
		status := e.Checks.AggregatedStatus()
		switch {
		case status == api.HealthPassing:
		case status == api.HealthWarning && includeWarning:
		default:
			skip = append(skip, skipped{e.Node.Node, e.Service.ID, "health " + status})
			continue
		}
		addr := cmp.Or(e.Service.Address, e.Node.Address)
		ip, err := netip.ParseAddr(addr)
		if err != nil || ip.Zone() != "" {
			skip = append(skip, skipped{e.Node.Node, e.Service.ID, fmt.Sprintf("address %q is not an IP address (the mesh needs one; set the service's address)", addr)})
			continue
		}
		if e.Service.Port < 1 || e.Service.Port > 65535 {
			skip = append(skip, skipped{e.Node.Node, e.Service.ID, fmt.Sprintf("port %d is not 1-65535", e.Service.Port)})
			continue
		}
		out = append(out, instance{node: e.Node.Node, id: e.Service.ID, ep: provider.Endpoint{
			IP: ip.Unmap(), Port: uint16(e.Service.Port), Labels: instanceLabels(e, status),
		}})
	}
	return out, skip
}

func instanceLabels(e *api.ServiceEntry, status string) map[string]string {
	l := map[string]string{
		labelNode:      e.Node.Node,
		labelService:   e.Service.Service,
		labelServiceID: e.Service.ID,
	}
	if e.Node.Datacenter != "" {
		l[labelDatacenter] = e.Node.Datacenter
	}
	if e.Service.Namespace != "" {
		l[labelNamespace] = e.Service.Namespace
	}
	if e.Service.Partition != "" {
		l[labelPartition] = e.Service.Partition
	}
	if len(e.Service.Tags) > 0 {
		tags := slices.Clone(e.Service.Tags)
		slices.Sort(tags)
		l[labelTags] = strings.Join(slices.Compact(tags), ",")
	}
	for k, v := range e.Service.Meta {
		l[labelMetaPrefix+k] = v
	}
	if status == api.HealthWarning {
		l[labelHealth] = api.HealthWarning
	}
	return l
}

// mergeEndpoints joins the instances of every Consul service that maps to
// one mesh service, de-duplicated by ip:port (keeping the instance with
// the smallest node and service ID, so the result does not depend on the
// order of the answers) and sorted by ip:port.
func mergeEndpoints(lists ...[]instance) []provider.Endpoint {
	var all []instance
	for _, l := range lists {
		all = append(all, l...)
	}
	slices.SortFunc(all, func(a, b instance) int {
		return cmp.Or(
			netip.AddrPortFrom(a.ep.IP, a.ep.Port).Compare(netip.AddrPortFrom(b.ep.IP, b.ep.Port)),
			strings.Compare(a.node, b.node), strings.Compare(a.id, b.id))
	})
	out := make([]provider.Endpoint, 0, len(all))
	for i, in := range all {
		if i > 0 && in.ep.IP == all[i-1].ep.IP && in.ep.Port == all[i-1].ep.Port {
			continue
		}
		out = append(out, in.ep)
	}
	return out
}
