package spec

import (
	"errors"
	"net/netip"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

func egressTo(host string) string {
	return `apiVersion: osm-vm.io/v1alpha1
kind: Egress
metadata: {name: e}
spec:
  sources: [{kind: ServiceAccount, name: a}]
  hosts: ["` + host + `"]
  ports: [{number: 443, protocol: tls}]
`
}

func meshConfigEgress(hosts, cidrs string) string {
	return `apiVersion: osm-vm.io/v1alpha1
kind: MeshConfig
metadata: {name: mesh}
spec:
  egress: {allowedInternalHosts: [` + hosts + `], allowedInternalCIDRs: [` + cidrs + `]}
`
}

// TestEgressHostNotations applies an Egress to each host, by default and
// with a MeshConfig allowing the internal names: every notation of an IP
// address is refused (naming the address it is read as), internal names
// are refused unless allowed, external names pass.
func TestEgressHostNotations(t *testing.T) {
	const allowAll = "metadata.google.internal, db.ec2.internal, printer.local, kubernetes.default.svc, router.home.arpa, app.localhost"
	for _, c := range []struct {
		host string
		// want is what the error says by default ("" accepted);
		// allowed, with allowAll in MeshConfig ("" accepted).
		want, allowed string
	}{
		// IPv4, as inet_aton reads it.
		{"127.0.0.1", "IP address 127.0.0.1 (loopback)", "IP address 127.0.0.1"},
		{"169.254.169.254", "IP address 169.254.169.254 (link-local (169.254.169.254 is the AWS", "IP address 169.254.169.254"},
		{"0177.0.0.1", "IP address 127.0.0.1 (loopback)", "IP address 127.0.0.1"},
		{"0x7f.1", "IP address 127.0.0.1 (loopback)", "IP address 127.0.0.1"},
		{"0x7f.0.0.1", "IP address 127.0.0.1", "IP address 127.0.0.1"},
		{"127.1", "IP address 127.0.0.1", "IP address 127.0.0.1"},
		{"127.0.1", "IP address 127.0.0.1", "IP address 127.0.0.1"},
		{"2130706433", "IP address 127.0.0.1", "IP address 127.0.0.1"},
		{"0x7f000001", "IP address 127.0.0.1", "IP address 127.0.0.1"},
		{"017700000001", "IP address 127.0.0.1", "IP address 127.0.0.1"},
		{"0xa9.0xfe.0xa9.0xfe", "IP address 169.254.169.254", "IP address 169.254.169.254"},
		{"0251.0376.0251.0376", "IP address 169.254.169.254", "IP address 169.254.169.254"},
		{"169.16689662", "IP address 169.254.169.254", "IP address 169.254.169.254"},
		{"2852039166", "IP address 169.254.169.254", "IP address 169.254.169.254"},
		{"0", "IP address 0.0.0.0 (unspecified", "IP address 0.0.0.0"},
		{"0.0.0.0", "IP address 0.0.0.0 (unspecified", "IP address 0.0.0.0"},
		{"100.100.100.200", "IP address 100.100.100.200 (the Alibaba Cloud metadata service)", "IP address 100.100.100.200"},
		{"168.63.129.16", "IP address 168.63.129.16 (the Azure WireServer)", "IP address 168.63.129.16"},
		{"10.1.2.3", "IP address 10.1.2.3 (private)", "IP address 10.1.2.3"},
		{"8.8.8.8", "IP address 8.8.8.8 (public)", "IP address 8.8.8.8"},
		// IPv6.
		{"::1", "IP address ::1 (loopback)", "IP address ::1"},
		{"[::1]", "IP address ::1 (loopback)", "IP address ::1"},
		{"::", "IP address :: (unspecified)", "IP address ::"},
		{"::ffff:127.0.0.1", "IP address ::ffff:127.0.0.1 (loopback, IPv4-mapped)", "IP address ::ffff:127.0.0.1"},
		{"::ffff:a9fe:a9fe", "IP address ::ffff:169.254.169.254 (link-local", "IP address ::ffff:169.254.169.254"},
		{"fe80::1", "IP address fe80::1 (link-local)", "IP address fe80::1"},
		{"fe80::1%eth0", "IP address fe80::1 (link-local)", "IP address fe80::1"},
		{"fd00:ec2::254", "IP address fd00:ec2::254 (the AWS metadata service (IPv6))", "IP address fd00:ec2::254"},
		{"2001:db8::1", "IP address 2001:db8::1 (public)", "IP address 2001:db8::1"},
		// Internal names: refused unless allowed.
		{"metadata", `host "metadata" is the GCP metadata service's short name`, `host "metadata" is the GCP metadata service's short name`},
		{"instance-data", `host "instance-data" is the AWS metadata service's short name`, `is the AWS metadata service's short name`},
		{"localhost", `host "localhost" is the machine's own loopback`, `host "localhost" is the machine's own loopback`},
		{"metadata.google.internal", `host "metadata.google.internal" is the GCP metadata service: an Egress reaches hosts outside the mesh, and the machine that connects would reach its own internal services; if this Egress really needs it, list "metadata.google.internal" in MeshConfig "mesh" spec.egress.allowedInternalHosts (and, for an egress gateway to connect to it, its addresses in spec.egress.allowedInternalCIDRs)`, ""},
		{"db.ec2.internal", "under .internal", ""},
		{"printer.local", "under .local", ""},
		{"kubernetes.default.svc", "under .svc", ""},
		{"router.home.arpa", "under .home.arpa", ""},
		{"app.localhost", "under .localhost", ""},
		// External names, including ones that look numeric but are not
		// addresses, and ones that resolve to internal addresses (the
		// egress gateway refuses those when it connects).
		{"api.github.com", "", ""},
		{"1e100.net", "", ""},
		{"0x7f.example.com", "", ""},
		{"127.0.0.1.nip.io", "", ""},
		{"localhost.example.com", "", ""},
		{"internal.example.com", "", ""},
	} {
		t.Run(c.host, func(t *testing.T) {
			for _, mc := range []struct {
				name, doc, want string
			}{{"default", "", c.want}, {"allowed", meshConfigEgress(allowAll, "169.254.169.254/32") + "---\n", c.allowed}} {
				s := newTestSpec(t, store.NewMemory())
				_, err := tryApplyYAML(t, s, mc.doc+egressTo(c.host))
				switch {
				case mc.want == "" && err != nil:
					t.Errorf("%s: Egress to %q: %v, want it accepted", mc.name, c.host, err)
				case mc.want != "" && (err == nil || !strings.Contains(err.Error(), mc.want)):
					t.Errorf("%s: Egress to %q: error = %v, want it to contain %q", mc.name, c.host, err, mc.want)
				case mc.want != "" && !strings.Contains(err.Error(), "Egress default/e (egress.yaml document") && !strings.Contains(err.Error(), "Egress default/e (egress.yaml"):
					t.Errorf("%s: error = %v, want it to name the document", mc.name, err)
				}
			}
		})
	}
}

func TestInetAton(t *testing.T) {
	for in, want := range map[string]string{
		"1.2.3.4": "1.2.3.4", "1.2.3": "1.2.0.3", "1.2": "1.0.0.2", "1": "0.0.0.1", "0x": "0.0.0.0",
		"0xffffffff": "255.255.255.255", "255.0xffffff": "255.255.255.255", "037777777777": "255.255.255.255",
	} {
		if got, ok := inetAton(in); !ok || got.String() != want {
			t.Errorf("inetAton(%q) = %v, %v; want %s", in, got, ok, want)
		}
	}
	for _, in := range []string{"", "1.2.3.4.5", "256.1.1.1", "1.2.3.256", "0x100000000", "4294967296", "08", "1..2", "1.2.3.", "a.b.c.d", "1.0x1000000", "+1", "1.-2"} {
		if got, ok := inetAton(in); ok {
			t.Errorf("inetAton(%q) = %v, want no address", in, got)
		}
	}
}

func TestEgressDeniedPrefixes(t *testing.T) {
	def := DefaultMeshConfig().Spec.EgressDeniedPrefixes()
	if !slicesHas(def, "169.254.0.0/16") || !slicesHas(def, "::ffff:169.254.0.0/112") || !slicesHas(def, "fd00:ec2::254/128") {
		t.Fatalf("default denied = %v", def)
	}
	c := DefaultMeshConfig().Spec
	c.Egress.AllowedInternalCIDRs = []string{"169.254.170.2/32", "127.0.0.0/8"}
	got := c.EgressDeniedPrefixes()
	if slicesHas(got, "169.254.0.0/16") || slicesHas(got, "127.0.0.0/8") {
		t.Errorf("allowing 169.254.170.2/32 and 127.0.0.0/8 left %v", got)
	}
	for _, a := range []string{"169.254.170.1", "169.254.170.3", "169.254.169.254", "169.254.0.0", "169.254.255.255", "::ffff:169.254.170.2", "::ffff:127.0.0.1"} {
		if !covered(got, a) {
			t.Errorf("%s is not denied any more: %v", a, got)
		}
	}
	for _, a := range []string{"169.254.170.2", "127.0.0.1", "127.255.255.255", "8.8.8.8"} {
		if covered(got, a) {
			t.Errorf("%s is still denied", a)
		}
	}
}

func slicesHas(ps []netip.Prefix, s string) bool {
	for _, p := range ps {
		if p.String() == s {
			return true
		}
	}
	return false
}

func covered(ps []netip.Prefix, s string) bool {
	a := netip.MustParseAddr(s)
	for _, p := range ps {
		if p.Contains(a) {
			return true
		}
	}
	return false
}

func TestMeshConfigEgressInvalid(t *testing.T) {
	for name, c := range map[string]struct{ hosts, cidrs, want string }{
		"address as host": {"169.254.169.254", "", `spec.egress.allowedInternalHosts[0]: "169.254.169.254" is the IP address 169.254.169.254: list names here`},
		"external host":   {"api.github.com", "", `"api.github.com" is not an internal name`},
		"duplicate host":  {"a.internal, a.internal", "", "duplicate host"},
		"bad cidr":        {"", "169.254.169.254", `spec.egress.allowedInternalCIDRs[0]: "169.254.169.254" is not a CIDR`},
		"host bits":       {"", "169.254.169.254/16", "has host bits set: write 169.254.0.0/16"},
		"not internal":    {"", "10.0.0.0/8", "10.0.0.0/8 is not internal"},
		"duplicate cidr":  {"", "127.0.0.0/8, 127.0.0.0/8", "duplicate range"},
		"everything v4":   {"", "0.0.0.0/0", "0.0.0.0/0 holds an unspecified address"},
		"everything v6":   {"", `"::/0"`, "::/0 holds an unspecified address"},
		"this network":    {"", "0.0.0.0/8", "holds an unspecified address"},
	} {
		t.Run(name, func(t *testing.T) {
			_, err := Parse([]byte(meshConfigEgress(c.hosts, c.cidrs)), "mesh.yaml")
			if err == nil || !strings.Contains(err.Error(), c.want) {
				t.Errorf("error = %v, want it to contain %q", err, c.want)
			}
		})
	}
	many := strings.Repeat("127.0.0.0/8, ", maxAllowedInternal+1)
	if _, err := Parse([]byte(meshConfigEgress("", strings.TrimSuffix(many, ", "))), "mesh.yaml"); err == nil || !strings.Contains(err.Error(), "more than 64") {
		t.Errorf("65 ranges: error = %v", err)
	}
}

// TestMeshConfigKeepsAllowancesInUse: a MeshConfig that stops allowing a
// host an Egress lists is refused, and so is deleting it; the Egress keeps
// being served meanwhile, and once the Egress is gone the MeshConfig may
// change.
func TestMeshConfigKeepsAllowancesInUse(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	if _, err := tryApplyYAML(t, s, meshConfigEgress("metadata.google.internal", "169.254.169.254/32")+"---\n"+egressTo("metadata.google.internal")); err != nil {
		t.Fatal(err)
	}
	_, err := tryApplyYAML(t, s, meshConfigEgress("", ""))
	if err == nil || !strings.Contains(err.Error(), `spec.egress.allowedInternalHosts: Egress default/e spec.hosts[0] lists "metadata.google.internal"`) {
		t.Fatalf("dropping the allowance: %v", err)
	}
	_, err = s.Delete(t.Context(), []Key{{Kind: KindMeshConfig, Name: MeshConfigName}}, false)
	if !errors.Is(err, ErrConflict) || !strings.Contains(err.Error(), `Egress default/e lists host "metadata.google.internal"`) {
		t.Fatalf("deleting the MeshConfig: %v", err)
	}
	a := mesh.ServiceAccount{Namespace: "default", Name: "a"}
	if got := s.Snapshot().Egress(a); len(got) != 1 || got[0].Host != "metadata.google.internal" {
		t.Fatalf("Egress(a) = %+v, want the allowed host", got)
	}
	if _, err := s.Delete(t.Context(), []Key{{Kind: KindMeshConfig, Name: MeshConfigName}, {Kind: KindEgress, Namespace: "default", Name: "e"}}, false); err != nil {
		t.Fatalf("deleting both in one batch: %v", err)
	}
}

// TestSnapshotLeavesOutDisallowedHosts: hosts stored by an older server
// (before apply refused them) are not served, to sources or gateways.
func TestSnapshotLeavesOutDisallowedHosts(t *testing.T) {
	st := &state{objects: map[Key]Object{}, vips: map[mesh.MeshService]netip.Addr{}}
	gw := &EgressGateway{TypeMeta: TypeMeta{APIVersion: APIVersionOSM, Kind: KindEgressGateway}, Metadata: ObjectMeta{Name: "gw", Namespace: "default"}, Spec: EgressGatewaySpec{Port: 15444}}
	e := &Egress{TypeMeta: TypeMeta{APIVersion: APIVersionOSM, Kind: KindEgress}, Metadata: ObjectMeta{Name: "e", Namespace: "default"}, Spec: EgressSpec{
		Sources: []IdentityBindingSubject{{Kind: serviceAccountKindSMI, Namespace: "default", Name: "a"}},
		Hosts:   []string{"0x7f.1", "api.github.com", "metadata.google.internal"},
		Ports:   []EgressPort{{Number: 443, Protocol: EgressTLS, TargetPort: 443}},
		Gateway: &EgressGatewayRef{Name: "gw", Namespace: "default"},
	}}
	st.objects[gw.Key()], st.objects[e.Key()] = gw, e
	for i, h := range e.Spec.Hosts {
		st.vips[egressVIPKey(h)] = netip.AddrFrom4([4]byte{240, 0, 0, byte(i + 1)})
	}
	snap := newSnapshot(st, 1)
	var hosts []string
	for _, r := range snap.Egress(mesh.ServiceAccount{Namespace: "default", Name: "a"}) {
		hosts = append(hosts, r.Host)
	}
	var gwHosts []string
	for _, r := range snap.EgressGatewayRoutes(mesh.MeshService{Namespace: "default", Name: "gw"}) {
		gwHosts = append(gwHosts, r.Host)
	}
	if d := cmp.Diff([]string{"api.github.com"}, hosts); d != "" {
		t.Errorf("Egress hosts (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"api.github.com"}, gwHosts); d != "" {
		t.Errorf("EgressGatewayRoutes hosts (-want +got):\n%s", d)
	}
}
