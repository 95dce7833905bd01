package render

// What validating one proxy's set checks across its resources: the kinds
// and names of resources, the references between them, and that no two
// listeners share an address (read from an encoded listener's bytes too).

import (
	"fmt"
	"net/netip"
	"strconv"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	endpointv3 "github.com/envoyproxy/go-control-plane/envoy/config/endpoint/v3"
	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	routev3 "github.com/envoyproxy/go-control-plane/envoy/config/route/v3"
	tlsv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/transport_sockets/tls/v3"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
)

// Encoded is a resource written as bytes, not built as a message: by an
// encoder ([EncodeClusterLoadAssignment], [EncodeServiceCertSecret]) or
// from the stamp of its shape (see [ClusterResources] and its siblings). Whatever validating its
// message would check holds by construction, or was checked when it was
// written; Refs are the resources it references, which a proxy must
// receive with it.
type Encoded struct {
	TypeURL, Name string
	Bytes         []byte
	Refs          []Ref
}

// Ref names a resource that another references.
type Ref struct{ TypeURL, Name string }

// Type URLs of the resources render writes, and their kinds as the
// Validator names them.
var (
	loadAssignmentType = typeURLOf(&endpointv3.ClusterLoadAssignment{})
	clusterType        = typeURLOf(&clusterv3.Cluster{})
	listenerType       = typeURLOf(&listenerv3.Listener{})
	routeType          = typeURLOf(&routev3.RouteConfiguration{})
	secretType         = typeURLOf(&tlsv3.Secret{})
	// typeOfKind is kindOfType's inverse.
	typeOfKind = func() map[string]string {
		out := map[string]string{}
		for _, t := range []string{listenerType, routeType, clusterType, loadAssignmentType, secretType} {
			out[kindOfType(t)] = t
		}
		return out
	}()
)

// kindOfType returns the kind of the resources of type URL t, as the
// Validator names them ("" for another type): a switch, not a map, as
// every encoded resource and reference of every proxy's set asks it.
func kindOfType(t string) string {
	switch t {
	case listenerType:
		return "listener"
	case routeType:
		return "route configuration"
	case clusterType:
		return "cluster"
	case loadAssignmentType:
		return "load assignment"
	case secretType:
		return "secret"
	}
	return ""
}

func typeURLOf(m proto.Message) string { return "type.googleapis.com/" + string(nameOf(m)) }

// reference is a name of kind that resource from refers to (from is nil
// once remembered for a filter chain, and for an encoded resource, which
// fromKind and fromName name).
type reference struct {
	from               proto.Message
	fromKind, fromName string
	kind, name         string
}

// kindAndName returns the kind and name of resource r ("" for another
// type).
func kindAndName(r proto.Message) (kind, name string) {
	switch r := r.(type) {
	case *listenerv3.Listener:
		return "listener", r.GetName()
	case *routev3.RouteConfiguration:
		return "route configuration", r.GetName()
	case *clusterv3.Cluster:
		return "cluster", r.GetName()
	case *endpointv3.ClusterLoadAssignment:
		return "load assignment", r.GetClusterName()
	case *tlsv3.Secret:
		return "secret", r.GetName()
	}
	return "", ""
}

// labelOf names resource r in errors (`cluster "default/bookstore"`), or
// returns "".
func labelOf(r proto.Message) string {
	kind, name := kindAndName(r)
	if kind == "" {
		return ""
	}
	return kind + " " + strconv.Quote(name)
}

func (v *validation) ref(kind, name string) {
	v.refs = append(v.refs, reference{from: v.in, kind: kind, name: name})
}

func (v *validation) index(r proto.Message) {
	kind, name := kindAndName(r)
	if kind == "" {
		v.errs = append(v.errs, finding{nil, fmt.Sprintf("unexpected resource type %T: want a listener, route configuration, cluster, load assignment or secret", r)})
		return
	}
	v.indexNamed(kind, name)
}

// indexNamed indexes the resource of kind (as kindAndName names it) named
// name.
func (v *validation) indexNamed(kind, name string) {
	if kind == "secret" && v.flavor == GRPC {
		v.errs = append(v.errs, finding{nil, fmt.Sprintf("secret %q: gRPC has no SDS; its TLS comes from certificate provider %q", name, CertProviderInstance)})
	}
	v.add(v.names(kind), kind, name)
}

// names returns the names of the set's resources of kind.
func (v *validation) names(kind string) map[string]bool {
	switch kind {
	case "listener":
		return v.listeners
	case "route configuration":
		return v.routes
	case "cluster":
		return v.clusters
	case "load assignment":
		return v.eds
	case "secret":
		return v.secrets
	}
	return nil
}

// add indexes the resource of kind named name in m (one of v's maps of
// names), reporting a missing or repeated name.
func (v *validation) add(m map[string]bool, kind, name string) {
	switch {
	case name == "":
		v.errs = append(v.errs, finding{nil, kind + " without a name"})
	case m[name]:
		v.errs = append(v.errs, finding{nil, fmt.Sprintf("%s %q appears twice in the set", kind, name)})
	}
	m[name] = true
}

// uniqueAddress checks, across the set, that no two listeners share an
// address and port (it is not remembered per resource).
func (v *validation) uniqueAddress(l *listenerv3.Listener) {
	sa := l.GetAddress().GetSocketAddress()
	ip, err := netip.ParseAddr(sa.GetAddress())
	if l.GetApiListener() != nil || sa == nil || err != nil {
		return
	}
	v.claimAddress(netip.AddrPortFrom(ip, uint16(sa.GetPortValue())), l.GetName(), false)
}

// claimAddress records that listener name listens on addr, reporting
// another that does too (naming name when it is encoded: a finding about
// a message names it already).
func (v *validation) claimAddress(addr netip.AddrPort, name string, encoded bool) {
	if other, ok := v.addrs[addr]; ok {
		label := ""
		if encoded {
			label = "listener " + strconv.Quote(name) + ": "
		}
		v.fail("%slistens on %s like listener %q: give each listener its own address and port", label, addr, other)
		return
	}
	v.addrs[addr] = name
}

// listenerAddress returns the socket address of the encoded listener b
// (false for an API listener, or one without an IP address).
func listenerAddress(b []byte) (netip.AddrPort, bool) {
	const (
		listenerAddressField = 2  // Listener.address
		listenerAPIField     = 19 // Listener.api_listener
	)
	addr, ok := field(b, listenerAddressField, protowire.BytesType)
	if !ok {
		return netip.AddrPort{}, false
	}
	if _, api := field(b, listenerAPIField, protowire.BytesType); api {
		return netip.AddrPort{}, false
	}
	sock, ok := field(addr, addressSocket, protowire.BytesType)
	if !ok {
		return netip.AddrPort{}, false
	}
	text, _ := field(sock, socketAddr, protowire.BytesType)
	ip, err := netip.ParseAddr(string(text))
	if err != nil {
		return netip.AddrPort{}, false
	}
	var port uint64
	if v, ok := field(sock, socketPortValue, protowire.VarintType); ok {
		port, _ = protowire.ConsumeVarint(v)
	}
	return netip.AddrPortFrom(ip, uint16(port)), true
}

// field returns the value of the last field num of wire type typ in the
// encoded message b: a length-delimited field's content, another's
// encoding (a varint's bytes).
func field(b []byte, num protowire.Number, typ protowire.Type) ([]byte, bool) {
	var out []byte
	found := false
	for len(b) > 0 {
		n, t, l := protowire.ConsumeTag(b)
		if l < 0 {
			return nil, false
		}
		m := protowire.ConsumeFieldValue(n, t, b[l:])
		if m < 0 {
			return nil, false
		}
		if n == num && t == typ {
			out, found = b[l:l+m], true
			if t == protowire.BytesType {
				out, _ = protowire.ConsumeBytes(out)
			}
		}
		b = b[l+m:]
	}
	return out, found
}
