// Package mesh holds the core value types of osm-vm: mesh services, their
// endpoints, service accounts and proxy identities. It has no behaviour
// beyond parsing, formatting and validating them, and imports nothing of
// osm-vm.
package mesh

import (
	"cmp"
	"fmt"
	"net/netip"
	"strings"

	"github.com/google/uuid"
)

// MeshService is a service in the mesh: a name within a namespace.
type MeshService struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// String returns "namespace/name".
func (s MeshService) String() string { return s.Namespace + "/" + s.Name }

// Validate checks that both parts are DNS-1123 labels.
func (s MeshService) Validate() error {
	if err := ValidateLabel("namespace", s.Namespace); err != nil {
		return err
	}
	return ValidateLabel("service name", s.Name)
}

// Compare orders services by namespace, then name.
func (s MeshService) Compare(o MeshService) int {
	return cmp.Or(cmp.Compare(s.Namespace, o.Namespace), cmp.Compare(s.Name, o.Name))
}

// ServiceAccount is the identity a service's workloads run as. By default a
// service's account has the service's name.
type ServiceAccount struct {
	Namespace string `json:"namespace"`
	Name      string `json:"name"`
}

// String returns "namespace/name".
func (a ServiceAccount) String() string { return a.Namespace + "/" + a.Name }

// SPIFFEID returns spiffe://<trustDomain>/ns/<namespace>/sa/<name>.
func (a ServiceAccount) SPIFFEID(trustDomain string) string {
	return "spiffe://" + trustDomain + "/ns/" + a.Namespace + "/sa/" + a.Name
}

// ControlPlaneSPIFFEID returns spiffe://<trustDomain>/osm-vm/control-plane,
// the identity every osm-server serving certificate carries and every
// client of the control plane requires. No machine can hold it: service
// and proxy identities are all under /ns/.
func ControlPlaneSPIFFEID(trustDomain string) string {
	return "spiffe://" + trustDomain + "/osm-vm/control-plane"
}

// TrustDomain returns the trust domain of a SPIFFE ID (spiffe://<td>/...).
func TrustDomain(spiffeID string) (string, error) {
	rest, ok := strings.CutPrefix(spiffeID, "spiffe://")
	td, _, _ := strings.Cut(rest, "/")
	if !ok || td == "" {
		return "", fmt.Errorf("%q is not a SPIFFE ID (spiffe://<trust domain>/...)", spiffeID)
	}
	return td, nil
}

// Endpoint is one address serving a mesh service, as discovered by a
// provider instance.
type Endpoint struct {
	IP       netip.Addr        `json:"ip"`
	Port     uint16            `json:"port"`
	Labels   map[string]string `json:"labels,omitempty"`
	Provider string            `json:"provider"`
}

// AddrPort returns the endpoint's address and port.
func (e Endpoint) AddrPort() netip.AddrPort { return netip.AddrPortFrom(e.IP, e.Port) }

// Compare orders endpoints by address, port, then provider.
func (e Endpoint) Compare(o Endpoint) int {
	return cmp.Or(e.AddrPort().Compare(o.AddrPort()), cmp.Compare(e.Provider, o.Provider))
}

// ValidateLabel checks that s is a DNS-1123 label; what names the value in
// the error.
func ValidateLabel(what, s string) error {
	switch {
	case s == "":
		return fmt.Errorf("%s is empty", what)
	case len(s) > 63:
		return fmt.Errorf("%s %q is longer than 63 characters", what, s)
	case !isDNS1123Label(s):
		return fmt.Errorf("%s %q is not a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)", what, s)
	}
	return nil
}

// isDNS1123Label reports whether s matches ^[a-z0-9]([-a-z0-9]*[a-z0-9])?$
// (a loop, not a regular expression: the certificate manager checks the
// labels of every service account the publisher asks a certificate of).
func isDNS1123Label(s string) bool {
	if s == "" || s[0] == '-' || s[len(s)-1] == '-' {
		return false
	}
	for i := 0; i < len(s); i++ {
		if c := s[i]; !('a' <= c && c <= 'z' || '0' <= c && c <= '9' || c == '-') {
			return false
		}
	}
	return true
}

// ProxyIdentity identifies one proxy: the seed's certificate common name
// <proxy-uuid>.<service>.<namespace>.
type ProxyIdentity struct {
	UUID    uuid.UUID
	Service MeshService
}

// NewProxyIdentity returns an identity with a fresh random UUID.
func NewProxyIdentity(svc MeshService) ProxyIdentity {
	return ProxyIdentity{UUID: uuid.New(), Service: svc}
}

// CommonName returns <proxy-uuid>.<service>.<namespace>.
func (p ProxyIdentity) CommonName() string {
	return p.UUID.String() + "." + p.Service.Name + "." + p.Service.Namespace
}

// String returns the common name.
func (p ProxyIdentity) String() string { return p.CommonName() }

// ParseProxyIdentity parses a proxy certificate common name.
func ParseProxyIdentity(cn string) (ProxyIdentity, error) {
	parts := strings.Split(cn, ".")
	if len(parts) != 3 {
		return ProxyIdentity{}, fmt.Errorf("proxy identity %q: want <proxy-uuid>.<service>.<namespace>", cn)
	}
	id, err := uuid.Parse(parts[0])
	if err != nil || len(parts[0]) != 36 {
		return ProxyIdentity{}, fmt.Errorf("proxy identity %q: %q is not a UUID", cn, parts[0])
	}
	svc := MeshService{Namespace: parts[2], Name: parts[1]}
	if err := svc.Validate(); err != nil {
		return ProxyIdentity{}, fmt.Errorf("proxy identity %q: %w", cn, err)
	}
	return ProxyIdentity{UUID: id, Service: svc}, nil
}
