// Package gateway is the Gateway API in the mesh specification: the
// CRDs' defaults (what the API server would fill in) and the validation
// of each kind's spec (HTTPRoute, GRPCRoute, ReferenceGrant, Gateway,
// TCPRoute, TLSRoute) by the upstream CRDs' OpenAPI bounds and CEL rules
// and by what osm-vm supports; the resolution of routes' parents and
// backends against the rest of the specification (a World); the status a
// controller reports for routes and Gateways; and the Index that answers
// rendering's questions for one snapshot (the rules that route calls to
// a Service's port, each Gateway's listeners and hosts).
//
// It works on the upstream Go types (sigs.k8s.io/gateway-api/apis/v1).
// It must not import spec or anything of ours but internal/mesh: spec
// imports it, holds the documents that carry those types and their
// registration as kinds, and comes in through three small interfaces:
// Checker (what validation reports to), World (the Services, Gateways,
// ReferenceGrants, TrafficSplits and routes) and Machines (the gateway
// machines connected, for the Programmed status).
package gateway

// Checker is what validation reports to and the checks it shares with
// the rest of the specification; spec's validator is one.
type Checker interface {
	// Errorf refuses the document for field.
	Errorf(field, format string, args ...any)
	// Warnf accepts it with a warning about field.
	Warnf(field, format string, args ...any)
	// CheckRegex checks a regular expression as every regex of the
	// specification is checked (RE2 syntax, Envoy's program size).
	CheckRegex(field, re string)
	// CheckPort checks a port number.
	CheckPort(field string, port int)
	// DidYouMean returns ` (did you mean "x"?)` for the candidate closest
	// to s, or "".
	DidYouMean(s string, candidates []string) string
}

const (
	// Group is the Gateway API's API group.
	Group              = "gateway.networking.k8s.io"
	KindHTTPRoute      = "HTTPRoute"
	KindGRPCRoute      = "GRPCRoute"
	KindReferenceGrant = "ReferenceGrant"
	KindGateway        = "Gateway"
	// KindTCPRoute is the Gateway API's TCPRoute (SMI has a kind of the
	// same name in another group).
	KindTCPRoute = "TCPRoute"
	KindTLSRoute = "TLSRoute"
	// ClassName is the gatewayClassName every Gateway names.
	ClassName = "osm-vm"
	// ControllerName is the controller of that class (Gateway status and
	// the route status of Gateway parents).
	ControllerName = "osm-vm.io/gateway-controller"
	// kindService is the kind (group "") a parentRef or backendRef names
	// for a Service.
	kindService = "Service"

	maxRouteParentRefs       = 32
	maxRouteRules            = 16
	maxRuleMatches           = 64
	maxRouteMatches          = 128
	maxRuleFilters           = 16
	maxRuleBackends          = 16
	maxMatchHeaders          = 16
	maxHeaderModifiers       = 16
	maxBackendWeight         = 1000000
	maxPathLength            = 1024
	maxHeaderValueLength     = 4096
	maxGRPCNameLength        = 1024
	maxReferenceGrantEntries = 16
	maxGatewayListen         = 64
	maxTLSRouteHostnames     = 1024
)
