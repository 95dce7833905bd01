package spec

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// FuzzParse checks that the parser never panics and that every document it
// accepts survives a round trip through its canonical YAML unchanged.
func FuzzParse(f *testing.F) {
	for _, path := range [][]string{
		{"..", "..", "examples", "bookstore", "mesh.yaml"},
		{"..", "..", "examples", "bookstore", "gateway-api", "mesh.yaml"},
		{"..", "xds", "render", "testdata", "gateway-features.yaml"},
	} {
		if b, err := os.ReadFile(filepath.Join(path...)); err == nil {
			f.Add(b)
		}
	}
	f.Add([]byte(kubectlService))
	for _, s := range []string{
		svcHead + "spec: {ports: [{port: 80, targetPort: 8080, appProtocol: grpc}], serviceAccount: sa}\n",
		`{"apiVersion":"osm-vm.io/v1alpha1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":1}]}}`,
		`[{"apiVersion":"specs.smi-spec.io/v1alpha4","kind":"TCPRoute","metadata":{"name":"t"},"spec":{"matches":{"ports":[1,2]}}}]`,
		"apiVersion: v1\nkind: List\nitems:\n- apiVersion: osm-vm.io/v1alpha1\n  kind: MeshConfig\n  metadata: {name: mesh}\n  spec: {certificate: {serviceLifetime: 1h}}\n",
		"---\n---\n",
		"a: &a [*a, *a]\n",
		"apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: r}\nspec:\n  matches:\n    - {name: m, pathRegex: \"/a(\", headers: {x: \"[\"}}\n",
		// Alias bombs: refused by their expanded size, not decoded.
		aliasBomb(4<<10, 80),
		nestedBomb(3, 1<<10),
		"a: &a [&b [*c], &c [*b]]\n",
		svcHead + "spec: &s {ports: [{port: 80}], x: *s}\n",
		"- &x {apiVersion: osm-vm.io/v1alpha1, kind: Service, metadata: {name: a}, spec: {ports: [{port: 1}]}}\n- *x\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		docs, err := Parse(data, "fuzz")
		if err != nil {
			return
		}
		var total int
		for _, d := range docs {
			n := len(canonicalJSON(d.Object))
			if n > maxDocumentBytes+1<<10 { // the defaults add a little
				t.Fatalf("%s accepted at %d bytes, over the limit of %d", d.Key(), n, maxDocumentBytes)
			}
			total += n
		}
		if total > maxRequestExpandedBytes+len(docs)<<10 {
			t.Fatalf("%d documents accepted at %d bytes together, over the limit of %d", len(docs), total, maxRequestExpandedBytes)
		}
		for _, d := range docs {
			y := canonicalYAML(d.Object)
			again, err := Parse([]byte(y), "canonical")
			if err != nil {
				t.Fatalf("canonical YAML of %s does not parse: %v\n%s", d.Key(), err, y)
			}
			if len(again) != 1 || !canonicalEqual(again[0].Object, d.Object) {
				t.Fatalf("round trip changed %s:\n%s", d.Key(), y)
			}
		}
	})
}

// aliasBomb is a Service whose annotations repeat one large scalar by
// alias: a few KiB of YAML that expands to scalar*refs bytes.
func aliasBomb(scalar, refs int) string {
	var b strings.Builder
	b.WriteString("apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata:\n  name: web\n  annotations:\n")
	fmt.Fprintf(&b, "    a0: &big %q\n", strings.Repeat("x", scalar))
	for i := 1; i < refs; i++ {
		fmt.Fprintf(&b, "    a%d: *big\n", i)
	}
	b.WriteString("spec: {ports: [{port: 80}]}\n")
	return b.String()
}

// nestedBomb is an HTTPRouteGroup whose methods are a tree of aliased
// lists, depth levels of fan-out 4 above a leaf of leaf bytes: too few
// nodes for yaml.v3's alias check, leaf*4^depth bytes once expanded.
func nestedBomb(depth, leaf int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "l0: &l0 %q\n", strings.Repeat("y", leaf))
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [*l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1)
	}
	fmt.Fprintf(&b, "apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: r}\nspec: {matches: [{name: m, methods: *l%d}]}\n", depth)
	return b.String()
}
