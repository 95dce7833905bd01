package spec

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/osm-vm/osm-vm/internal/spec/spectest"
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
		spectest.AliasBomb(4<<10, 80),
		spectest.NestedBomb(3, 1<<10),
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
