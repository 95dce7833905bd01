package render

import (
	"bytes"
	"strings"
	"testing"
	"unicode/utf8"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"github.com/envoyproxy/protoc-gen-validate/validate"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
)

// TestStampEDSClusterNameLengths: an EDS cluster stamped with names of
// every length a DNS label may have equals the built one, so every
// length prefix around them (one byte and two) is encoded again right.
func TestStampEDSClusterNameLengths(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), bookstoreEndpoints(t))
	for _, f := range []Flavor{Envoy, GRPC} {
		info := spec.ServiceInfo{Ports: []spec.ServicePort{{Port: 8080, AppProtocol: "http"}}}
		sh := newShape(f, edsPlaceholders, nil, func() (proto.Message, error) {
			tmpl := info
			tmpl.Service = placeholderService
			tmpl.ServiceAccount = mesh.ServiceAccount{Namespace: edsPlaceholders[2], Name: edsPlaceholders[3]}
			b := &builder{}
			return b.edsCluster(m, tmpl, f, clusterPolicyOf(m.Spec().ServiceResilience(svc("bookstore")), f)), b.err
		})
		if sh.err != nil {
			t.Fatal(sh.err)
		}
		for n := 1; n <= 63; n++ {
			vals := []string{strings.Repeat("n", n), strings.Repeat("s", 64-n), strings.Repeat("a", n), strings.Repeat("b", n)}
			in := info
			in.Service = mesh.MeshService{Namespace: vals[0], Name: vals[1]}
			in.ServiceAccount = mesh.ServiceAccount{Namespace: vals[2], Name: vals[3]}
			b := &builder{}
			want, err := proto.MarshalOptions{Deterministic: true}.Marshal(b.edsCluster(m, in, f, clusterPolicyOf(m.Spec().ServiceResilience(svc("bookstore")), f)))
			if err != nil {
				t.Fatal(err)
			}
			e, err := sh.write(vals, nil)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(e.Bytes, want) {
				t.Fatalf("%s, names of %d bytes: stamped\n%x\nbuilt\n%x", f, n, e.Bytes, want)
			}
			if e.Name != ClusterName(in.Service, f) {
				t.Errorf("stamped name %q, want %q", e.Name, ClusterName(in.Service, f))
			}
		}
		if _, err := sh.write([]string{"\xff", "a", "b", "c"}, nil); err == nil || !strings.Contains(err.Error(), "not valid UTF-8") {
			t.Errorf("a name that is not UTF-8: error = %v", err)
		}
	}
}

// TestStampRefuses: a placeholder may only be in a string whose rules a
// stamp can check, and in an Any of a known type.
func TestStampRefuses(t *testing.T) {
	phs := []string{"\x00p\x00"}
	stampOf := func(m proto.Message) error {
		b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		_, err = newStamp(b, m.ProtoReflect().Descriptor(), phs, nil)
		return err
	}
	for _, tc := range []struct {
		name string
		msg  proto.Message
		want string
	}{
		{"bytes field", &corev3.DataSource{Specifier: &corev3.DataSource_InlineBytes{InlineBytes: []byte(phs[0])}}, "only strings may vary"},
		{"unknown Any", &clusterv3.Cluster{Name: "c", TransportSocket: &corev3.TransportSocket{Name: "t", ConfigType: &corev3.TransportSocket_TypedConfig{TypedConfig: &anypb.Any{TypeUrl: "type.googleapis.com/no.such.Type", Value: []byte{0x0a, 3, 0, 'p', 0}}}}}, "an Any of an unknown type"},
		{"pattern rule", &corev3.HeaderValue{Key: phs[0]}, "rules a stamp cannot check"},
	} {
		if err := stampOf(tc.msg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: error = %v, want one containing %q", tc.name, err, tc.want)
		}
	}
	if err := stampOf(&clusterv3.Cluster{Name: phs[0]}); err != nil {
		t.Errorf("a cluster's name: %v", err)
	}
}

// TestStampCheckValue: the rules a stamp checks on what it writes, as
// protoc-gen-validate would.
func TestStampCheckValue(t *testing.T) {
	fd := (&clusterv3.Cluster{}).ProtoReflect().Descriptor().Fields().ByName("name")
	u := func(n uint64) *uint64 { return &n }
	s := func(v string) *string { return &v }
	for _, tc := range []struct {
		rules *validate.StringRules
		v     string
		ok    bool
	}{
		{nil, "", true},
		{nil, "\xff", false},
		{&validate.StringRules{MinLen: u(1)}, "", false},
		{&validate.StringRules{MinLen: u(1)}, "é", true},
		{&validate.StringRules{MaxLen: u(1)}, "é", true},
		{&validate.StringRules{MaxBytes: u(1)}, "é", false},
		{&validate.StringRules{Len: u(2)}, "ab", true},
		{&validate.StringRules{LenBytes: u(2)}, "é", true},
		{&validate.StringRules{MinBytes: u(3)}, "ab", false},
		{&validate.StringRules{Prefix: s("spiffe://")}, "spiffe://x", true},
		{&validate.StringRules{Prefix: s("spiffe://")}, "http://x", false},
		{&validate.StringRules{Suffix: s("|grpc")}, "a|grpc", true},
		{&validate.StringRules{Contains: s("/")}, "ab", false},
		{&validate.StringRules{NotContains: s("/")}, "a/b", false},
		{&validate.StringRules{MinLen: u(1), IgnoreEmpty: proto.Bool(true)}, "", true},
	} {
		err := checkValue(fd, tc.rules, tc.v)
		if (err == nil) != tc.ok {
			t.Errorf("rules %v, value %q: error %v, want ok=%v", tc.rules, tc.v, err, tc.ok)
		}
		// checkRules skips making a hole's value when its rules are on
		// lengths and its lengths meet them: it must agree.
		if tc.rules != nil && lengthsOnly(tc.rules) && utf8.ValidString(tc.v) {
			if got := lengthsHold(tc.rules, uint64(len(tc.v)), uint64(utf8.RuneCountInString(tc.v))); got != tc.ok {
				t.Errorf("rules %v, value %q: lengthsHold %v, want %v", tc.rules, tc.v, got, tc.ok)
			}
		}
	}
}

// TestStampChecksAHoleOfSeveralSegments: a hole made of text and
// placeholders is checked at its whole length, in bytes and runes, whether
// its value is made (content rules, or a broken rule to report) or not.
func TestStampChecksAHoleOfSeveralSegments(t *testing.T) {
	fd := (&clusterv3.Cluster{}).ProtoReflect().Descriptor().Fields().ByName("name")
	u := func(n uint64) *uint64 { return &n }
	segs := []stampSeg{{text: "é-", ph: -1}, {ph: 0}, {text: ".", ph: -1}, {ph: 1}} // "é-" + a + "." + b
	for _, tc := range []struct {
		rules *validate.StringRules
		vals  []string
		ok    bool
	}{
		{&validate.StringRules{MaxLen: u(6)}, []string{"ab", "c"}, true},    // 6 runes
		{&validate.StringRules{MaxLen: u(5)}, []string{"ab", "c"}, false},   // 6 runes
		{&validate.StringRules{MaxBytes: u(6)}, []string{"ab", "c"}, false}, // 7 bytes
		{&validate.StringRules{MinLen: u(5)}, []string{"", ""}, false},      // 3 runes
		{&validate.StringRules{Len: u(4)}, []string{"", "é"}, true},         // 4 runes, 6 bytes
	} {
		st := &stamp{parts: []stampPart{{field: fd, rules: tc.rules, hole: segs}}}
		if err := st.checkRules(tc.vals); (err == nil) != tc.ok {
			t.Errorf("rules %v, value %q: error %v, want ok=%v", tc.rules, holeValue(segs, tc.vals), err, tc.ok)
		}
	}
	if got := holeValue(segs[1:2], []string{"x", "y"}); got != "x" {
		t.Errorf("a hole of one placeholder = %q, want its value", got)
	}
}
