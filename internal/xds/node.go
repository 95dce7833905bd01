package xds

// The node a proxy names in its requests: the metadata the agent writes
// into its bootstraps, read and checked once per stream, and the types each
// flavour of proxy is served. Pure functions: nothing here holds state.

import (
	"net/netip"
	"path"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/osm-vm/osm-vm/internal/xds/render"
)

// Node metadata keys the agent writes into its bootstraps.
const (
	MetadataFlavor  = "osm.flavor"           // "envoy" (default), "grpc" or "gateway"
	MetadataAddress = "osm.advertiseAddress" // the VM's address; inbound listeners bind it
	// MetadataGatewayCertDir is a gateway machine's certificate directory
	// (osm-agent's gatewayCertDir), optional: its HTTPS listeners read
	// their certificates from files under it.
	MetadataGatewayCertDir = "osm.gatewayCertDir"
)

// parseNode reads the proxy's flavour and advertise address from the node
// metadata the agent writes. A proxy without an advertise address is
// refused rather than given the connection's peer address: behind NAT, a
// load balancer or on a machine with several addresses the peer address is
// not the one others reach it on, so its inbound listeners would bind an
// address the machine does not have and its endpoints would never count as
// connected; an error the proxy logs at once names the fix instead.
func parseNode(node *corev3.Node) (render.Flavor, netip.Addr, error) {
	md := node.GetMetadata().GetFields()
	flavor := render.Envoy
	if v, ok := md[MetadataFlavor]; ok {
		f, ok := v.GetKind().(*structpb.Value_StringValue)
		if !ok {
			return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s is %s, want the string envoy, grpc or gateway", MetadataFlavor, kindOf(v))
		}
		switch f.StringValue {
		case "", "envoy":
		case "grpc":
			flavor = render.GRPC
		case "gateway":
			flavor = render.Gateway
		default:
			return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s %q: want envoy, grpc or gateway", MetadataFlavor, f.StringValue)
		}
	}
	v, ok := md[MetadataAddress]
	if !ok || v.GetStringValue() == "" && kindOf(v) == "a string" {
		return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s is missing: set advertiseAddress in the osm-agent config (or %s in a hand-written bootstrap) to the IP address other machines reach this one on", MetadataAddress, MetadataAddress)
	}
	a, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s is %s, want an IP address as a string", MetadataAddress, kindOf(v))
	}
	ip, err := netip.ParseAddr(a.StringValue)
	switch {
	case err != nil:
		return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s %q is not an IP address: set advertiseAddress in the osm-agent config to this machine's address", MetadataAddress, a.StringValue)
	case ip.Zone() != "" || ip.IsUnspecified() || ip.IsMulticast():
		return 0, netip.Addr{}, status.Errorf(codes.InvalidArgument, "node metadata %s %q is not an address other machines can reach this one on: set advertiseAddress in the osm-agent config to this machine's unicast address", MetadataAddress, a.StringValue)
	}
	return flavor, ip.Unmap(), nil
}

// parseGatewayCertDir reads the optional osm.gatewayCertDir: an absolute,
// clean path.
func parseGatewayCertDir(node *corev3.Node) (string, error) {
	v, ok := node.GetMetadata().GetFields()[MetadataGatewayCertDir]
	if !ok {
		return "", nil
	}
	d, ok := v.GetKind().(*structpb.Value_StringValue)
	if !ok {
		return "", status.Errorf(codes.InvalidArgument, "node metadata %s is %s, want an absolute directory as a string", MetadataGatewayCertDir, kindOf(v))
	}
	if d.StringValue != "" && (!path.IsAbs(d.StringValue) || path.Clean(d.StringValue) != d.StringValue) {
		return "", status.Errorf(codes.InvalidArgument, "node metadata %s %q: want an absolute, clean directory path (gatewayCertDir in the osm-agent config)", MetadataGatewayCertDir, d.StringValue)
	}
	return d.StringValue, nil
}

// kindOf names the kind of a metadata value for an error message.
func kindOf(v *structpb.Value) string {
	switch v.GetKind().(type) {
	case *structpb.Value_StringValue:
		return "a string"
	case *structpb.Value_NumberValue:
		return "a number"
	case *structpb.Value_BoolValue:
		return "a bool"
	case *structpb.Value_StructValue:
		return "an object"
	case *structpb.Value_ListValue:
		return "a list"
	}
	return "null"
}

// checkType refuses a request for a type the server never publishes for a
// proxy of this flavour: it would otherwise wait for an answer forever.
func checkType(f render.Flavor, typeURL string) error {
	switch typeURL {
	case resource.ClusterType, resource.EndpointType, resource.ListenerType, resource.RouteType:
		return nil
	case resource.SecretType:
		if f != render.GRPC {
			return nil
		}
		return status.Errorf(codes.InvalidArgument, "type %s is served to Envoy proxies only; a proxyless gRPC client (node metadata %s grpc) reads its certificates from files", typeURL, MetadataFlavor)
	case "":
		return status.Error(codes.InvalidArgument, "type_url is required on every ADS request")
	}
	served := "CDS, EDS, LDS and RDS"
	if f != render.GRPC {
		served += " (and SDS)"
	}
	return status.Errorf(codes.InvalidArgument, "type %q is not served: osm-server serves %s over ADS", typeURL, served)
}
