// Package spectest holds the hostile documents the specification's tests
// send to the parser and to the REST handler: YAML that is small on the
// wire and huge once its aliases are expanded.
package spectest

import (
	"fmt"
	"strings"
)

// AliasBomb is a Service whose annotations repeat one large scalar by
// alias: a few KiB of YAML that expands to scalar*refs bytes.
func AliasBomb(scalar, refs int) string {
	var b strings.Builder
	b.WriteString("apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata:\n  name: web\n  annotations:\n")
	fmt.Fprintf(&b, "    a0: &big %q\n", strings.Repeat("x", scalar))
	for i := 1; i < refs; i++ {
		fmt.Fprintf(&b, "    a%d: *big\n", i)
	}
	b.WriteString("spec: {ports: [{port: 80}]}\n")
	return b.String()
}

// NestedBomb is an HTTPRouteGroup whose methods are a tree of aliased
// lists, depth levels of fan-out 4 above a leaf of leaf bytes: too few
// nodes for yaml.v3's alias check, leaf*4^depth bytes once expanded.
func NestedBomb(depth, leaf int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "l0: &l0 %q\n", strings.Repeat("y", leaf))
	for i := 1; i <= depth; i++ {
		fmt.Fprintf(&b, "l%d: &l%d [*l%d, *l%d, *l%d, *l%d]\n", i, i, i-1, i-1, i-1, i-1)
	}
	fmt.Fprintf(&b, "apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: r}\nspec: {matches: [{name: m, methods: *l%d}]}\n", depth)
	return b.String()
}
