// Package osmvm_test holds repository-wide checks. TestImportRules enforces
// the import direction of docs/architecture.md with `go list -deps`, so a
// forbidden import fails the build instead of waiting for review.
package osmvm_test

import (
	"encoding/json"
	"errors"
	"io"
	"os/exec"
	"path"
	"strings"
	"testing"
)

const module = "github.com/osm-vm/osm-vm"

// rule: packages matching pkg must not depend, directly or transitively,
// on anything matching one of forbid, except what matches allow.
type rule struct {
	pkg    string
	forbid []string
	allow  []string
	why    string
}

var rules = []rule{
	{pkg: module + "/proto/...", forbid: []string{module + "/..."}, allow: []string{module + "/proto/..."},
		why: "the plugin API is the bottom layer and imports nothing of ours"},
	{pkg: module + "/provider/...", forbid: []string{module + "/..."}, allow: []string{module + "/provider/...", module + "/proto/..."},
		why: "the public plugin SDK may import only proto/"},
	{pkg: module + "/providers/...", forbid: []string{module + "/internal/...", module + "/cmd/..."},
		why: "a provider plugin imports only provider/ and proto/"},
	{pkg: module + "/internal/mesh", forbid: []string{module + "/..."}, allow: []string{module + "/internal/mesh"},
		why: "core value types import nothing of ours"},
	{pkg: module + "/internal/catalog", forbid: []string{module + "/..."}, allow: []string{module + "/internal/catalog", module + "/internal/mesh", module + "/internal/spec"},
		why: "the catalog joins mesh data and knows nothing of plugins, xDS or HTTP"},
	{pkg: module + "/internal/xds/cache", forbid: []string{module + "/..."}, allow: []string{module + "/internal/xds/cache"},
		why: "the xDS cache knows node IDs, type URLs and resources, not services or policies"},
	{pkg: module + "/internal/spec/...", forbid: []string{"github.com/envoyproxy/...", module + "/internal/xds/...", module + "/internal/catalog/..."},
		why: "the mesh specification stays free of Envoy so other front ends can be added"},
	{pkg: module + "/internal/cli", forbid: []string{module + "/..."}, allow: []string{module + "/internal/cli"},
		why: "the commands' shared edge (logger flags, version) imports nothing of ours"},
	{pkg: module + "/internal/atomicfile", forbid: []string{module + "/..."}, allow: []string{module + "/internal/atomicfile"},
		why: "atomic file replacement is a leaf, shared by the server and the agent"},
	{pkg: module + "/internal/store", forbid: []string{module + "/..."}, allow: []string{module + "/internal/store"},
		why: "persistence knows keys, versions and bytes, nothing of the mesh"},
	{pkg: module + "/internal/certificate/...", forbid: []string{module + "/..."}, allow: []string{module + "/internal/certificate/...", module + "/internal/mesh", module + "/internal/store"},
		why: "the CA needs only mesh identities and the store"},
	{pkg: module + "/internal/enroll/...", forbid: []string{module + "/..."}, allow: []string{module + "/internal/enroll/...", module + "/internal/mesh", module + "/internal/store"},
		why: "enrollment declares the issuer it needs instead of importing the CA, and is shared with the agent"},
	{pkg: module + "/internal/xds/render/...", forbid: []string{module + "/..."}, allow: []string{module + "/internal/xds/render/...", module + "/internal/mesh", module + "/internal/spec", module + "/internal/catalog"},
		why: "rendering is pure: mesh state in, Envoy resources out, no I/O or serving"},
	{pkg: module + "/internal/agent/...", forbid: []string{module + "/internal/spec/...", module + "/internal/catalog/...", module + "/internal/certificate/...", module + "/internal/xds/...", module + "/internal/pluginhost/...", module + "/internal/api/..."},
		why: "the agent runs on every VM and talks to the server only over its APIs (it reaches internal/store's types only through enroll)"},
	{pkg: module + "/internal/...", forbid: []string{module + "/cmd/...", module + "/providers/..."},
		why: "libraries never import binaries"},
	{pkg: "...", forbid: []string{"k8s.io/client-go/..."}, allow: []string{},
		why: "only providers/kubernetes may import client-go"},
	{pkg: "...", forbid: []string{"github.com/Azure/azure-sdk-for-go/..."},
		why: "only providers/azure may import the Azure SDK"},
	{pkg: "...", forbid: []string{"github.com/servicemeshinterface/smi-sdk-go/..."},
		why: "SMI types are defined locally (smi-sdk-go is unmaintained and breaks with current client-go)"},
}

// exempt packages from "..." rules.
var exempt = map[string][]string{
	"k8s.io/client-go/...":                  {module + "/providers/kubernetes/..."},
	"github.com/Azure/azure-sdk-for-go/...": {module + "/providers/azure/..."},
}

var bannedNames = []string{"utils", "util", "common", "types", "constants", "models", "helpers"}

type pkgInfo struct {
	ImportPath string
	Deps       []string
}

func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-json", "./...").Output()
	if err != nil {
		var ee *exec.ExitError
		if errors.As(err, &ee) {
			t.Fatalf("go list: %v\n%s", err, ee.Stderr)
		}
		t.Fatalf("go list: %v", err)
	}
	var pkgs []pkgInfo
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for {
		var p pkgInfo
		if err := dec.Decode(&p); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("decode go list output: %v", err)
		}
		pkgs = append(pkgs, p)
	}
	if len(pkgs) == 0 {
		t.Fatal("go list found no packages")
	}
	return pkgs
}

// match reports whether p matches pattern, where a trailing "/..." matches
// the path and everything below it, and "..." matches everything.
func match(pattern, p string) bool {
	if pattern == "..." {
		return true
	}
	if base, ok := strings.CutSuffix(pattern, "/..."); ok {
		return p == base || strings.HasPrefix(p, base+"/")
	}
	return p == pattern
}

func anyMatch(patterns []string, p string) bool {
	for _, pat := range patterns {
		if match(pat, p) {
			return true
		}
	}
	return false
}

func TestImportRules(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, r := range rules {
			if !match(r.pkg, p.ImportPath) {
				continue
			}
			for _, dep := range p.Deps {
				if !anyMatch(r.forbid, dep) || anyMatch(r.allow, dep) || dep == p.ImportPath {
					continue
				}
				exempted := false
				for _, f := range r.forbid {
					if anyMatch(exempt[f], p.ImportPath) {
						exempted = true
					}
				}
				if !exempted {
					t.Errorf("%s depends on %s: %s", p.ImportPath, dep, r.why)
				}
			}
		}
	}
}

func TestNoGrabBagPackages(t *testing.T) {
	for _, p := range listPackages(t) {
		for _, banned := range bannedNames {
			if path.Base(p.ImportPath) == banned {
				t.Errorf("package %s: name packages for what they provide, not %q (STYLE.md 1)", p.ImportPath, banned)
			}
		}
	}
}

func TestRuleMatcher(t *testing.T) {
	for _, tc := range []struct {
		pattern, path string
		want          bool
	}{
		{module + "/internal/...", module + "/internal/mesh", true},
		{module + "/internal/...", module + "/internal", true},
		{module + "/internal/...", module + "/internalx", false},
		{module + "/internal/mesh", module + "/internal/mesh/sub", false},
		{"...", "fmt", true},
	} {
		if got := match(tc.pattern, tc.path); got != tc.want {
			t.Errorf("match(%q, %q) = %v, want %v", tc.pattern, tc.path, got, tc.want)
		}
	}
}
