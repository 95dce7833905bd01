// Package spec owns the mesh specification: Service documents (osm-vm.io
// and Kubernetes v1), the SMI policies (TrafficTarget, HTTPRouteGroup,
// TCPRoute, TrafficSplit), Egress and EgressGateway, the Gateway API
// kinds (Gateway, HTTPRoute, GRPCRoute, TCPRoute, TLSRoute,
// ReferenceGrant) with their route and Gateway status, the failure
// handling policies (OSM's UpstreamTrafficSetting and Retry, and
// BackendTrafficPolicy), and the MeshConfig singleton. It parses and strictly validates YAML or JSON documents,
// applies batches atomically, allocates each Service a stable virtual IP,
// and publishes immutable, versioned Snapshots that the catalog and the
// xDS layer query.
//
// How the documents are stored is internal/spec/specstore's (which spec
// imports); the REST API is internal/spec/spechttp's and its client
// internal/spec/specclient's (which import spec, never the reverse).
// spec knows nothing of Envoy, xDS, endpoints, the catalog or HTTP
// serving, and must not import them (deps_test.go enforces this).
package spec

import (
	"encoding/json"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/spec/resilience"
)

// API versions and kinds this package accepts.
const (
	APIVersionOSM         = "osm-vm.io/v1alpha1"
	APIVersionAccess      = "access.smi-spec.io/v1alpha3"
	APIVersionSpecs       = "specs.smi-spec.io/v1alpha4"
	APIVersionSplit       = "split.smi-spec.io/v1alpha4"
	KindService           = "Service"
	KindTrafficTarget     = "TrafficTarget"
	KindHTTPRouteGroup    = "HTTPRouteGroup"
	KindTCPRoute          = "TCPRoute"
	KindTrafficSplit      = "TrafficSplit"
	KindMeshConfig        = "MeshConfig"
	MeshConfigName        = "mesh"
	DefaultNamespace      = "default"
	DefaultVIPRange       = "127.77.0.0/16"
	defaultServiceLife    = 24 * time.Hour
	defaultProxyLife      = 7 * 24 * time.Hour
	maxPort               = 65535
	serviceAccountKindSMI = "ServiceAccount"
)

// kindInfo describes one supported kind.
type kindInfo struct {
	kind       string
	apiVersion string
	plural     string
	namespaced bool
	newObject  func() Object
}

// kinds lists the supported kinds in apply order: Services and MeshConfig
// first so references inside one batch resolve.
var kinds = slices.Concat([]kindInfo{
	{KindMeshConfig, APIVersionOSM, "meshconfigs", false, func() Object { return &MeshConfig{} }},
	{KindService, APIVersionOSM, "services", true, func() Object { return &Service{} }},
	{KindHTTPRouteGroup, APIVersionSpecs, "httproutegroups", true, func() Object { return &HTTPRouteGroup{} }},
	{KindTCPRoute, APIVersionSpecs, "tcproutes", true, func() Object { return &TCPRoute{} }},
	{KindTrafficTarget, APIVersionAccess, "traffictargets", true, func() Object { return &TrafficTarget{} }},
	{KindTrafficSplit, APIVersionSplit, "trafficsplits", true, func() Object { return &TrafficSplit{} }},
	{KindEgressGateway, APIVersionOSM, "egressgateways", true, func() Object { return &EgressGateway{} }},
	{KindEgress, APIVersionOSM, "egresses", true, func() Object { return &Egress{} }},
}, gatewayKinds, gatewayL4Kinds, resilienceKinds)

func lookupKind(kind string) (kindInfo, bool) {
	for _, k := range kinds {
		if k.kind == kind {
			return k, true
		}
	}
	return kindInfo{}, false
}

// KindNames says how the API names kind: its plural (the REST path's
// segment) and whether its documents are namespaced; ok is false for a
// kind this version does not know.
func KindNames(kind string) (plural string, namespaced, ok bool) {
	ki, ok := lookupKind(kind)
	return ki.plural, ki.namespaced, ok
}

func kindOrder(kind string) int {
	return slices.IndexFunc(kinds, func(k kindInfo) bool { return k.kind == kind })
}

// PolicyKinds are the kinds `get policies` lists.
var policyKinds = []string{KindTrafficTarget, KindHTTPRouteGroup, KindTCPRoute, KindTrafficSplit, KindEgressGateway, KindEgress, KindReferenceGrant, KindGateway, KindHTTPRoute, KindGRPCRoute, KindTLSRoute, KindUpstreamTrafficSetting, KindRetry, KindBackendTrafficPolicy}

// ResolveKinds maps a kind as typed by a user ("services", "service",
// "Service", "svc", "policies", "all") to the kinds it names.
func ResolveKinds(s string) ([]string, error) {
	l := strings.ToLower(s)
	switch l {
	case "", "all":
		out := make([]string, 0, len(kinds))
		for _, k := range kinds {
			out = append(out, k.kind)
		}
		return out, nil
	case "policies", "policy":
		return slices.Clone(policyKinds), nil
	case "svc":
		return []string{KindService}, nil
	}
	names := []string{"all", "policies"}
	for _, k := range kinds {
		if l == strings.ToLower(k.kind) || l == k.plural {
			return []string{k.kind}, nil
		}
		names = append(names, k.plural)
	}
	return nil, fmt.Errorf("unknown kind %q: want one of %s%s", s, strings.Join(names, ", "), didYouMean(l, names))
}

// Key names one document.
type Key struct {
	Kind      string `json:"kind"`
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name"`
}

// String returns "Kind namespace/name" (or "Kind name" when cluster-wide).
func (k Key) String() string {
	if k.Namespace == "" {
		return k.Kind + " " + k.Name
	}
	return k.Kind + " " + k.Namespace + "/" + k.Name
}

func (k Key) compare(o Key) int {
	if c := kindOrder(k.Kind) - kindOrder(o.Kind); c != 0 {
		return c
	}
	if c := strings.Compare(k.Namespace, o.Namespace); c != 0 {
		return c
	}
	return strings.Compare(k.Name, o.Name)
}

// TypeMeta is the apiVersion and kind of a document.
type TypeMeta struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
}

// ObjectMeta is the metadata of a document. Labels and annotations are
// accepted (so Kubernetes files apply unchanged) and kept, but not used.
type ObjectMeta struct {
	Name        string            `json:"name"`
	Namespace   string            `json:"namespace,omitempty"`
	Labels      map[string]string `json:"labels,omitempty"`
	Annotations map[string]string `json:"annotations,omitempty"`
}

// Object is one mesh specification document.
type Object interface {
	// Key names the document.
	Key() Key
	meta() *ObjectMeta
	typeMeta() *TypeMeta
	// setDefaults fills the defaulted fields.
	setDefaults()
	// validate checks the document on its own (references are checked
	// against the whole state elsewhere).
	validate(v *validator)
}

func keyOf(t TypeMeta, m ObjectMeta) Key {
	return Key{Kind: t.Kind, Namespace: m.Namespace, Name: m.Name}
}

// Service is a mesh service: a name, ports and the service account its
// workloads run as.
type Service struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta     `json:"metadata"`
	Spec     ServiceSpec    `json:"spec"`
	Status   *ServiceStatus `json:"status,omitempty"`
}

// ServiceSpec is the spec of a Service.
type ServiceSpec struct {
	Ports []ServicePort `json:"ports"`
	// ServiceAccount defaults to the service's name.
	ServiceAccount string `json:"serviceAccount,omitempty"`
}

// ServicePort is one port of a Service.
type ServicePort struct {
	Name string `json:"name,omitempty"`
	// Port is the port clients call (on the VIP and the VM address).
	Port int `json:"port"`
	// TargetPort is the application's port on 127.0.0.1; defaults to Port.
	TargetPort int `json:"targetPort,omitempty"`
	// AppProtocol is http, tcp or grpc; defaults to http.
	AppProtocol string `json:"appProtocol,omitempty"`
}

// ServiceStatus is filled by the server in responses and ignored on apply.
type ServiceStatus struct {
	VIP string `json:"vip,omitempty"`
}

func (s *Service) Key() Key            { return keyOf(s.TypeMeta, s.Metadata) }
func (s *Service) meta() *ObjectMeta   { return &s.Metadata }
func (s *Service) typeMeta() *TypeMeta { return &s.TypeMeta }
func (s *Service) setDefaults() {
	s.Status = nil
	if s.Spec.ServiceAccount == "" {
		s.Spec.ServiceAccount = s.Metadata.Name
	}
	for i := range s.Spec.Ports {
		p := &s.Spec.Ports[i]
		if p.TargetPort == 0 {
			p.TargetPort = p.Port
		}
		if p.AppProtocol == "" {
			p.AppProtocol = "http"
		}
	}
}

// TrafficTarget (access.smi-spec.io/v1alpha3) allows sources to reach the
// destination service account with the given rules.
type TrafficTarget struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta        `json:"metadata"`
	Spec     TrafficTargetSpec `json:"spec"`
}

// TrafficTargetSpec is the spec of a TrafficTarget.
type TrafficTargetSpec struct {
	Destination IdentityBindingSubject   `json:"destination"`
	Sources     []IdentityBindingSubject `json:"sources,omitempty"`
	Rules       []TrafficTargetRule      `json:"rules,omitempty"`
}

// IdentityBindingSubject is a service account; namespace defaults to the
// TrafficTarget's.
type IdentityBindingSubject struct {
	Kind      string `json:"kind"`
	Name      string `json:"name"`
	Namespace string `json:"namespace,omitempty"`
	Port      *int   `json:"port,omitempty"`
}

// TrafficTargetRule names an HTTPRouteGroup or TCPRoute and optionally which
// of its matches apply (all when empty).
type TrafficTargetRule struct {
	Kind    string   `json:"kind"`
	Name    string   `json:"name"`
	Matches []string `json:"matches,omitempty"`
}

func (t *TrafficTarget) Key() Key            { return keyOf(t.TypeMeta, t.Metadata) }
func (t *TrafficTarget) meta() *ObjectMeta   { return &t.Metadata }
func (t *TrafficTarget) typeMeta() *TypeMeta { return &t.TypeMeta }
func (t *TrafficTarget) setDefaults() {
	if t.Spec.Destination.Namespace == "" {
		t.Spec.Destination.Namespace = t.Metadata.Namespace
	}
	for i := range t.Spec.Sources {
		if t.Spec.Sources[i].Namespace == "" {
			t.Spec.Sources[i].Namespace = t.Metadata.Namespace
		}
	}
}

// HTTPRouteGroup (specs.smi-spec.io/v1alpha4) is a named set of HTTP matches.
type HTTPRouteGroup struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta         `json:"metadata"`
	Spec     HTTPRouteGroupSpec `json:"spec"`
}

// HTTPRouteGroupSpec is the spec of an HTTPRouteGroup.
type HTTPRouteGroupSpec struct {
	Matches []HTTPMatch `json:"matches,omitempty"`
}

// HTTPMatch matches requests by path (RE2 regex, as Envoy uses), methods
// ("*" or empty for all) and header values (RE2 regexes).
type HTTPMatch struct {
	Name      string            `json:"name"`
	PathRegex string            `json:"pathRegex,omitempty"`
	Methods   []string          `json:"methods,omitempty"`
	Headers   map[string]string `json:"headers,omitempty"`
}

func (g *HTTPRouteGroup) Key() Key            { return keyOf(g.TypeMeta, g.Metadata) }
func (g *HTTPRouteGroup) meta() *ObjectMeta   { return &g.Metadata }
func (g *HTTPRouteGroup) typeMeta() *TypeMeta { return &g.TypeMeta }
func (g *HTTPRouteGroup) setDefaults()        {}

// TCPRoute (specs.smi-spec.io/v1alpha4) matches TCP traffic by port.
type TCPRoute struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta   `json:"metadata"`
	Spec     TCPRouteSpec `json:"spec"`
}

// TCPRouteSpec is the spec of a TCPRoute.
type TCPRouteSpec struct {
	Matches TCPMatch `json:"matches,omitempty"`
}

// TCPMatch lists ports; empty means all ports.
type TCPMatch struct {
	Name  string `json:"name,omitempty"`
	Ports []int  `json:"ports,omitempty"`
}

func (r *TCPRoute) Key() Key            { return keyOf(r.TypeMeta, r.Metadata) }
func (r *TCPRoute) meta() *ObjectMeta   { return &r.Metadata }
func (r *TCPRoute) typeMeta() *TypeMeta { return &r.TypeMeta }
func (r *TCPRoute) setDefaults()        {}

// TrafficSplit (split.smi-spec.io/v1alpha4) splits traffic for a root
// service between backend services by weight.
type TrafficSplit struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta       `json:"metadata"`
	Spec     TrafficSplitSpec `json:"spec"`
}

// TrafficSplitSpec is the spec of a TrafficSplit.
type TrafficSplitSpec struct {
	Service  string                      `json:"service"`
	Backends []TrafficSplitBackend       `json:"backends"`
	Matches  []TypedLocalObjectReference `json:"matches,omitempty"`
}

// TrafficSplitBackend is one backend service and its weight.
type TrafficSplitBackend struct {
	Service string `json:"service"`
	Weight  int    `json:"weight"`
}

// TypedLocalObjectReference names an HTTPRouteGroup (or TCPRoute) in the
// split's namespace.
type TypedLocalObjectReference struct {
	APIGroup *string `json:"apiGroup,omitempty"`
	Kind     string  `json:"kind"`
	Name     string  `json:"name"`
}

func (s *TrafficSplit) Key() Key            { return keyOf(s.TypeMeta, s.Metadata) }
func (s *TrafficSplit) meta() *ObjectMeta   { return &s.Metadata }
func (s *TrafficSplit) typeMeta() *TypeMeta { return &s.TypeMeta }
func (s *TrafficSplit) setDefaults()        {}

// MeshConfig (osm-vm.io/v1alpha1) is the singleton named "mesh" holding
// mesh-wide settings.
type MeshConfig struct {
	TypeMeta `json:",inline"`
	Metadata ObjectMeta     `json:"metadata"`
	Spec     MeshConfigSpec `json:"spec"`
}

// MeshConfigSpec is the spec of MeshConfig.
type MeshConfigSpec struct {
	Traffic     TrafficConfig     `json:"traffic"`
	Certificate CertificateConfig `json:"certificate"`
	Outbound    OutboundConfig    `json:"outbound"`
	Endpoints   EndpointsConfig   `json:"endpoints"`
	// Egress allows Egresses to reach internal names and addresses.
	Egress EgressConfig `json:"egress,omitzero"`
	// Resilience holds the failure handling every call gets unless a
	// policy says otherwise (nil: the built-in defaults, see package
	// resilience).
	Resilience *resilience.Defaults `json:"resilience,omitempty"`
}

// TrafficConfig holds traffic settings.
type TrafficConfig struct {
	// Permissive allows every service in the mesh to reach every other,
	// ignoring TrafficTargets.
	Permissive bool `json:"permissive"`
}

// CertificateConfig holds certificate lifetimes.
type CertificateConfig struct {
	ServiceLifetime Duration `json:"serviceLifetime"`
	ProxyLifetime   Duration `json:"proxyLifetime"`
}

// OutboundConfig holds the outbound settings.
type OutboundConfig struct {
	// VIPRange is the CIDR services' virtual IPs are allocated from.
	VIPRange string `json:"vipRange"`
}

// EndpointsConfig holds endpoint publication settings.
type EndpointsConfig struct {
	// RequireConnectedProxy sends an endpoint to other proxies only while
	// its own proxy is connected. Nil means true.
	RequireConnectedProxy *bool `json:"requireConnectedProxy"`
}

func (c *MeshConfig) Key() Key            { return Key{Kind: KindMeshConfig, Name: c.Metadata.Name} }
func (c *MeshConfig) meta() *ObjectMeta   { return &c.Metadata }
func (c *MeshConfig) typeMeta() *TypeMeta { return &c.TypeMeta }
func (c *MeshConfig) setDefaults() {
	if c.Spec.Certificate.ServiceLifetime == 0 {
		c.Spec.Certificate.ServiceLifetime = Duration(defaultServiceLife)
	}
	if c.Spec.Certificate.ProxyLifetime == 0 {
		c.Spec.Certificate.ProxyLifetime = Duration(defaultProxyLife)
	}
	if c.Spec.Outbound.VIPRange == "" {
		c.Spec.Outbound.VIPRange = DefaultVIPRange
	}
	if c.Spec.Endpoints.RequireConnectedProxy == nil {
		t := true
		c.Spec.Endpoints.RequireConnectedProxy = &t
	}
}

// DefaultMeshConfig returns the MeshConfig in effect when none was applied.
func DefaultMeshConfig() *MeshConfig {
	c := &MeshConfig{TypeMeta: TypeMeta{APIVersion: APIVersionOSM, Kind: KindMeshConfig}, Metadata: ObjectMeta{Name: MeshConfigName}}
	c.setDefaults()
	return c
}

func (c *MeshConfig) vipRange() netip.Prefix {
	p, err := netip.ParsePrefix(c.Spec.Outbound.VIPRange)
	if err != nil {
		p = netip.MustParsePrefix(DefaultVIPRange)
	}
	return p.Masked()
}

// Duration is a time.Duration written as "24h", "90m".
type Duration time.Duration

// MarshalJSON writes the duration as a string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// UnmarshalJSON reads a duration string like "24h".
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("want a duration string such as \"24h\" or \"90m\"")
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return fmt.Errorf("%q is not a duration: want a value such as \"24h\" or \"90m\"", s)
	}
	*d = Duration(v)
	return nil
}
