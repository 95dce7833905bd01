package spec

import (
	"fmt"
	"slices"
	"strings"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// AnnotationExternalDNSName on a Service names the host names (comma
// separated) under which osm-server's DNS publisher publishes the
// addresses of the service's endpoints (see docs/operator-guide.md, "DNS
// publishing").
const AnnotationExternalDNSName = "osm-vm.io/external-dns-name"

// maxHostname is the longest DNS name in text form, without the final dot.
const maxHostname = 253

// checkHostname checks that name is a lower-case, fully qualified DNS host
// name of two or more DNS-1123 labels, without a final dot or wildcard.
func checkHostname(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("host name is empty")
	case len(name) > maxHostname:
		return fmt.Errorf("host name %q is longer than %d characters", name, maxHostname)
	case strings.HasSuffix(name, "."):
		return fmt.Errorf("host name %q ends in a dot: write it without the final dot", name)
	case strings.ToLower(name) != name:
		return fmt.Errorf("host name %q has upper-case letters: write it in lower case", name)
	case strings.HasPrefix(name, "*"):
		return fmt.Errorf("host name %q is a wildcard: name each host", name)
	}
	labels := strings.Split(name, ".")
	if len(labels) < 2 {
		return fmt.Errorf("host name %q is not fully qualified: give the whole name, such as %s.example.com", name, name)
	}
	for _, l := range labels {
		if err := mesh.ValidateLabel("host name label", l); err != nil {
			return fmt.Errorf("host name %q: %w", name, err)
		}
	}
	if strings.HasSuffix(name, ".mesh") {
		return fmt.Errorf("host name %q is under .mesh, the mesh's own names: give an external name", name)
	}
	return nil
}

// externalNames parses the annotation's value: names, comma separated.
func externalNames(value string) []string {
	var out []string
	for n := range strings.SplitSeq(value, ",") {
		if n = strings.TrimSpace(n); n != "" {
			out = append(out, n)
		}
	}
	return out
}

// validateExternalDNSName checks the annotation on a Service.
func validateExternalDNSName(v *validator, annotations map[string]string) {
	value, ok := annotations[AnnotationExternalDNSName]
	if !ok {
		return
	}
	field := "metadata.annotations." + AnnotationExternalDNSName
	names := externalNames(value)
	if len(names) == 0 {
		v.errorf(field, "empty: give one or more host names, comma separated, or remove the annotation")
	}
	for _, n := range names {
		if err := checkHostname(n); err != nil {
			v.errorf(field, "%v", err)
		}
	}
}

// ExternalDNSNames returns the host names each Service asks to be
// published under (its AnnotationExternalDNSName), by service.
func (s *Snapshot) ExternalDNSNames() map[mesh.MeshService][]string {
	out := map[mesh.MeshService][]string{}
	for _, k := range s.keys {
		svc, ok := s.st.objects[k].(*Service)
		if !ok {
			continue
		}
		if v, ok := svc.Metadata.Annotations[AnnotationExternalDNSName]; ok {
			names := externalNames(v)
			slices.Sort(names)
			out[mesh.MeshService{Namespace: k.Namespace, Name: k.Name}] = slices.Compact(names)
		}
	}
	return out
}
