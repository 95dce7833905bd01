package spec

import (
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
)

// Egress to the inside. An Egress lets sources reach hosts outside the
// mesh; a host that is really the machine's own loopback, its link-local
// network or its cloud's metadata service would let a source reach what
// only the machine that connects (its own Envoy, or an egress gateway)
// should: the gateway's cloud credentials, its admin ports. So:
//
//   - an Egress host that is an IP address, in any notation an address
//     resolver reads (inet_aton's octal, hex and shortened IPv4 forms,
//     IPv6), is refused: a host is a DNS name;
//   - a name that always means something internal (internalNameWhy) is
//     refused unless MeshConfig spec.egress.allowedInternalHosts lists it;
//   - an egress gateway refuses to connect to an address of
//     internalRanges that a name resolves to, unless MeshConfig
//     spec.egress.allowedInternalCIDRs covers it (render: the DNS cache's
//     resolved_address_filter, see EgressDeniedPrefixes).

// EgressConfig holds MeshConfig's egress settings.
type EgressConfig struct {
	// AllowedInternalHosts are names an Egress may list although they
	// name something internal (such as metadata.google.internal).
	AllowedInternalHosts []string `json:"allowedInternalHosts,omitempty"`
	// AllowedInternalCIDRs are internal addresses (of internalRanges) an
	// egress gateway may connect to when a name resolves to them.
	AllowedInternalCIDRs []string `json:"allowedInternalCIDRs,omitempty"`
}

// maxAllowedInternal bounds each of EgressConfig's lists.
const maxAllowedInternal = 64

// egressAllowField names the MeshConfig fields in messages.
const (
	allowedHostsField = "spec.egress.allowedInternalHosts"
	allowedCIDRsField = "spec.egress.allowedInternalCIDRs"
)

// internalPrefix is an address range a host outside the mesh never has.
type internalPrefix struct {
	prefix netip.Prefix
	what   string
}

// internalPrefixes are the addresses an egress gateway refuses to connect
// to by default: every machine's own (loopback, unspecified, link-local)
// and the clouds' metadata services, in IPv4, IPv6 and IPv4-mapped IPv6
// (an AAAA record may carry ::ffff:169.254.169.254).
var internalPrefixes = func() []internalPrefix {
	v4 := []internalPrefix{
		{netip.MustParsePrefix("0.0.0.0/8"), "unspecified (this network)"},
		{netip.MustParsePrefix("127.0.0.0/8"), "loopback"},
		{netip.MustParsePrefix("169.254.0.0/16"), "link-local (169.254.169.254 is the AWS, GCP, Azure and OCI metadata service)"},
		{netip.MustParsePrefix("100.100.100.200/32"), "the Alibaba Cloud metadata service"},
		{netip.MustParsePrefix("168.63.129.16/32"), "the Azure WireServer"},
		{netip.MustParsePrefix("192.0.0.192/32"), "the Oracle Cloud Classic metadata service"},
	}
	out := slices.Clone(v4)
	out = append(out,
		internalPrefix{netip.MustParsePrefix("::/128"), "unspecified"},
		internalPrefix{netip.MustParsePrefix("::1/128"), "loopback"},
		internalPrefix{netip.MustParsePrefix("fe80::/10"), "link-local"},
		internalPrefix{netip.MustParsePrefix("fd00:ec2::254/128"), "the AWS metadata service (IPv6)"},
	)
	for _, p := range v4 {
		b := p.prefix.Addr().As4()
		mapped := netip.AddrFrom16([16]byte{10: 0xff, 11: 0xff, 12: b[0], 13: b[1], 14: b[2], 15: b[3]})
		out = append(out, internalPrefix{netip.PrefixFrom(mapped, 96+p.prefix.Bits()), p.what + ", IPv4-mapped"})
	}
	return out
}()

// internalRanges returns the address ranges an egress gateway refuses to
// connect to unless MeshConfig allows them.
func internalRanges() []netip.Prefix {
	out := make([]netip.Prefix, len(internalPrefixes))
	for i, p := range internalPrefixes {
		out[i] = p.prefix
	}
	return out
}

// internalAddrWhy says what internal range a is in ("" if none).
func internalAddrWhy(a netip.Addr) string {
	for _, p := range internalPrefixes {
		if p.prefix.Contains(a) {
			return p.what
		}
	}
	return ""
}

// EgressDeniedPrefixes returns the addresses an egress gateway of this
// MeshConfig refuses to connect to: internalRanges less
// spec.egress.allowedInternalCIDRs, sorted. Unparsable entries (apply
// refuses them) allow nothing.
func (c MeshConfigSpec) EgressDeniedPrefixes() []netip.Prefix {
	denied := internalRanges()
	for _, s := range c.Egress.AllowedInternalCIDRs {
		a, err := netip.ParsePrefix(s)
		if err != nil {
			continue
		}
		var next []netip.Prefix
		for _, d := range denied {
			next = append(next, subtractPrefix(d, a.Masked())...)
		}
		denied = next
	}
	slices.SortFunc(denied, func(a, b netip.Prefix) int {
		if c := a.Addr().Compare(b.Addr()); c != 0 {
			return c
		}
		return a.Bits() - b.Bits()
	})
	return slices.Compact(denied)
}

// subtractPrefix returns the prefixes covering p less a.
func subtractPrefix(p, a netip.Prefix) []netip.Prefix {
	switch {
	case !p.Overlaps(a):
		return []netip.Prefix{p}
	case a.Bits() <= p.Bits(): // a covers p
		return nil
	}
	// a is inside p: split p in halves, keep the one without a, recurse.
	lo := netip.PrefixFrom(p.Addr(), p.Bits()+1)
	hi := netip.PrefixFrom(lastOf(lo).Next(), p.Bits()+1)
	return append(subtractPrefix(lo, a), subtractPrefix(hi, a)...)
}

// lastOf returns the last address of p (p masked).
func lastOf(p netip.Prefix) netip.Addr {
	b := p.Addr().AsSlice()
	for i := p.Bits(); i < len(b)*8; i++ {
		b[i/8] |= 0x80 >> (i % 8)
	}
	a, _ := netip.AddrFromSlice(b)
	return a
}

// ipLiteral returns the address host is read as by an address resolver:
// IPv6 (with or without brackets and a zone), or IPv4 as inet_aton reads
// it (glibc's getaddrinfo, which resolvers fall back on): one to four
// parts separated by dots, each decimal, octal (a leading 0) or hex (0x),
// the last filling the bytes left (127.1 is 127.0.0.1, 2130706433 is
// 127.0.0.1, 0x7f.1 and 0177.0.0.1 too).
func ipLiteral(host string) (netip.Addr, bool) {
	h := strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
	if strings.Contains(h, ":") {
		a, err := netip.ParseAddr(h)
		return a.WithZone(""), err == nil
	}
	return inetAton(h)
}

// inetAton parses s as inet_aton(3) does (without its tolerance of
// trailing white space, which host names never have).
func inetAton(s string) (netip.Addr, bool) {
	parts := strings.Split(s, ".")
	if len(parts) > 4 {
		return netip.Addr{}, false
	}
	vals := make([]uint64, len(parts))
	for i, p := range parts {
		v, ok := atonPart(p)
		if !ok {
			return netip.Addr{}, false
		}
		vals[i] = v
	}
	last := vals[len(vals)-1]
	if last >= 1<<(8*(5-len(vals))) {
		return netip.Addr{}, false
	}
	var n uint64
	for _, v := range vals[:len(vals)-1] {
		if v > 0xff {
			return netip.Addr{}, false
		}
		n = n<<8 | v
	}
	n = n<<(8*(5-len(vals))) | last
	return netip.AddrFrom4([4]byte{byte(n >> 24), byte(n >> 16), byte(n >> 8), byte(n)}), true
}

// atonPart parses one part of an inet_aton address: 0x/0X hex (digits
// optional: "0x" is 0), a leading 0 octal, else decimal.
func atonPart(p string) (uint64, bool) {
	base, digits := 10, p
	switch {
	case p == "":
		return 0, false
	case len(p) >= 2 && (p[:2] == "0x" || p[:2] == "0X"):
		base, digits = 16, p[2:]
		if digits == "" {
			return 0, true
		}
	case len(p) > 1 && p[0] == '0':
		base, digits = 8, p[1:]
	}
	if digits == "" || digits[0] == '+' || digits[0] == '-' || len(digits) > 32 {
		return 0, false
	}
	v, err := strconv.ParseUint(digits, base, 64)
	if err != nil || v > 0xffffffff {
		return 0, false
	}
	return v, true
}

// describeAddr says what kind of address a is, for messages.
func describeAddr(a netip.Addr) string {
	if why := internalAddrWhy(a); why != "" {
		return why
	}
	switch {
	case a.IsPrivate():
		return "private"
	case a.IsMulticast():
		return "multicast"
	}
	return "public"
}

// Names that are always internal: the metadata services' names, and the
// domains reserved for names that never leave a site.
var (
	internalNames = map[string]string{
		"metadata":                 "the GCP metadata service's short name",
		"metadata.google.internal": "the GCP metadata service",
		"instance-data":            "the AWS metadata service's short name",
		"localhost":                "the machine's own loopback (RFC 6761)",
	}
	internalSuffixes = []struct{ suffix, why string }{
		{".localhost", "under .localhost, the machine's own loopback (RFC 6761)"},
		{".internal", "under .internal, the domain reserved for private networks (ICANN, 2024): the clouds' internal names, such as metadata.google.internal and *.ec2.internal"},
		{".local", "under .local, multicast DNS on the local link (RFC 6762), and Kubernetes' cluster.local"},
		{".home.arpa", "under .home.arpa, reserved for home networks (RFC 8375)"},
		{".svc", "under .svc, a Kubernetes Service's name inside its cluster"},
	}
)

// internalNameWhy says why host names something internal ("" if not).
func internalNameWhy(host string) string {
	if why, ok := internalNames[host]; ok {
		return why
	}
	for _, s := range internalSuffixes {
		if strings.HasSuffix(host, s.suffix) {
			return s.why
		}
	}
	return ""
}

// checkEgressHostLiteral refuses an Egress host that is an IP address or
// the short name of a metadata service; it reports whether it did.
func checkEgressHostLiteral(v *validator, field, host string) bool {
	if a, ok := ipLiteral(host); ok {
		v.errorf(field, "host %q is the IP address %s (%s) as an address resolver reads it: an Egress host is a DNS name (an application that connects to an address never looks the name up, so its Envoy would not carry it); give the host's DNS name. Through an egress gateway an internal address is reached only by a name, when MeshConfig %s allows it", host, a, describeAddr(a), allowedCIDRsField)
		return true
	}
	if why, ok := internalNames[host]; ok && !strings.Contains(host, ".") {
		v.errorf(field, "host %q is %s: an Egress reaches hosts outside the mesh, not the machine's own services; give a fully qualified external name", host, why)
		return true
	}
	return false
}

// checkEgressInternal refuses the hosts of e that name something internal
// and that cfg does not allow.
func checkEgressInternal(v *validator, cfg *MeshConfig, e *Egress) {
	for i, h := range e.Spec.Hosts {
		why := internalNameWhy(h)
		if why == "" || slices.Contains(cfg.Spec.Egress.AllowedInternalHosts, h) {
			continue
		}
		if _, ok := ipLiteral(h); ok {
			continue // refused already
		}
		v.errorf(fmt.Sprintf("spec.hosts[%d]", i), "host %q is %s: an Egress reaches hosts outside the mesh, and the machine that connects would reach its own internal services; if this Egress really needs it, list %q in MeshConfig %q %s (and, for an egress gateway to connect to it, its addresses in %s)", h, why, h, MeshConfigName, allowedHostsField, allowedCIDRsField)
	}
}

// egressHostAllowed reports whether cfg lets an Egress list host (what
// apply checks; a snapshot leaves out the hosts a store written otherwise
// has, or that a changed MeshConfig no longer allows).
func egressHostAllowed(cfg *MeshConfig, host string) bool {
	if _, ok := ipLiteral(host); ok {
		return false
	}
	return internalNameWhy(host) == "" || slices.Contains(cfg.Spec.Egress.AllowedInternalHosts, host)
}

// validateEgressConfig checks MeshConfig's spec.egress.
func validateEgressConfig(v *validator, c EgressConfig) {
	if n := len(c.AllowedInternalHosts); n > maxAllowedInternal {
		v.errorf(allowedHostsField, "%d hosts, more than %d", n, maxAllowedInternal)
	}
	seen := map[string]int{}
	for i, h := range c.AllowedInternalHosts {
		f := fmt.Sprintf("%s[%d]", allowedHostsField, i)
		if a, ok := ipLiteral(h); ok {
			v.errorf(f, "%q is the IP address %s: list names here, and addresses in %s", h, a, allowedCIDRsField)
			continue
		}
		if err := checkHostname(h); err != nil {
			v.errorf(f, "%v", err)
			continue
		}
		if j, ok := seen[h]; ok {
			v.errorf(f, "duplicate host %q (also %s[%d]): list each host once", h, allowedHostsField, j)
			continue
		}
		seen[h] = i
		if internalNameWhy(h) == "" {
			v.errorf(f, "%q is not an internal name: an Egress may list it without this; remove it", h)
		}
	}
	if n := len(c.AllowedInternalCIDRs); n > maxAllowedInternal {
		v.errorf(allowedCIDRsField, "%d ranges, more than %d", n, maxAllowedInternal)
	}
	seenP := map[netip.Prefix]int{}
	for i, s := range c.AllowedInternalCIDRs {
		f := fmt.Sprintf("%s[%d]", allowedCIDRsField, i)
		p, err := netip.ParsePrefix(s)
		switch {
		case err != nil:
			v.errorf(f, "%q is not a CIDR: want a range such as 169.254.170.2/32", s)
			continue
		case p.Masked() != p:
			v.errorf(f, "%q has host bits set: write %s", s, p.Masked())
			continue
		case p.Addr().Zone() != "":
			v.errorf(f, "%q has a zone: remove it", s)
			continue
		}
		if j, ok := seenP[p]; ok {
			v.errorf(f, "duplicate range %s (also %s[%d]): list each range once", p, allowedCIDRsField, j)
			continue
		}
		seenP[p] = i
		if p.Contains(netip.IPv4Unspecified()) || p.Contains(netip.IPv6Unspecified()) {
			v.errorf(f, "%s holds an unspecified address (0.0.0.0 or ::), which connects to the gateway machine itself and is never allowed: list narrower ranges", p)
		} else if !slices.ContainsFunc(internalRanges(), p.Overlaps) {
			v.errorf(f, "%s is not internal (loopback, link-local, unspecified or a metadata service): an egress gateway connects to it already; remove it", p)
		}
	}
}

// checkMeshConfigEgress refuses a MeshConfig that no longer allows a host
// a stored Egress (not changed in the same batch) lists.
func checkMeshConfigEgress(v *validator, st *state, c *MeshConfig) {
	for _, k := range sortedObjectKeys(st.objects) {
		e, ok := st.objects[k].(*Egress)
		if !ok {
			continue
		}
		for i, h := range e.Spec.Hosts {
			if why := internalNameWhy(h); why != "" && !slices.Contains(c.Spec.Egress.AllowedInternalHosts, h) {
				v.errorf(allowedHostsField, "%s spec.hosts[%d] lists %q (%s): keep it in this list, or change or delete the Egress first or in the same batch", k, i, h, why)
			}
		}
	}
}

// meshConfigDeleteConflict refuses to delete the MeshConfig while an
// Egress not deleted in the same batch lists a host only it allows.
func meshConfigDeleteConflict(st *state, gone map[Key]bool) error {
	mk := Key{Kind: KindMeshConfig, Name: MeshConfigName}
	if !gone[mk] {
		return nil
	}
	for _, k := range sortedObjectKeys(st.objects) {
		e, ok := st.objects[k].(*Egress)
		if !ok || gone[k] {
			continue
		}
		for _, h := range e.Spec.Hosts {
			if internalNameWhy(h) != "" {
				return fmt.Errorf("%w: %s lists host %q, which only %s allows (%s): delete or change the Egress first, or in the same batch", ErrConflict, k, h, mk, allowedHostsField)
			}
		}
	}
	return nil
}
