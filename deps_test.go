// Package osmvm_test holds repository-wide checks. TestImportRules enforces
// the import direction of docs/architecture.md with `go list -deps -test`,
// tests' imports included, so a forbidden import fails the build instead of
// waiting for review.
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
// on anything matching one of forbid, except what matches allow. The
// package's tests (its _test.go files, in the package or beside it) may
// also depend on what matches testAllow, for the reason testWhy.
type rule struct {
	pkg       string
	forbid    []string
	allow     []string
	why       string
	testAllow []string
	testWhy   string
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
	{pkg: module + "/internal/catalog", forbid: []string{module + "/..."}, allow: []string{module + "/internal/catalog", module + "/internal/mesh", module + "/internal/meshapi", module + "/internal/spec", module + "/internal/spec/gateway", module + "/internal/spec/resilience", module + "/internal/spec/specstore", module + "/internal/store"},
		why: "the catalog joins mesh data and knows nothing of plugins, xDS or HTTP (meshapi, store and specstore come with spec: the wire types of its errors, the store contract's KV and Op its Store interface names, the stored layout that reads and writes it)"},
	{pkg: module + "/internal/xds/cache", forbid: []string{module + "/..."}, allow: []string{module + "/internal/xds/cache", module + "/internal/xds/shard"},
		why: "the xDS cache knows node IDs, type URLs and resources, not services or policies (its Interner's maps are shard.Maps)"},
	{pkg: module + "/internal/xds/secrets", forbid: []string{module + "/internal/xds"},
		why: "the publisher's secret sets are a part the publisher uses: they never import the publisher's package"},
	{pkg: module + "/internal/xds/eds", forbid: []string{module + "/internal/xds"},
		why: "the publisher's EDS slots are a part the publisher uses: they never import the publisher's package"},
	{pkg: module + "/internal/xds/refusals", forbid: []string{module + "/internal/xds"},
		why: "the publisher's refusal listeners are a part the publisher uses: they never import the publisher's package"},
	{pkg: module + "/internal/xds/shard", forbid: []string{module + "/..."}, allow: []string{module + "/internal/xds/shard"},
		why: "the sharded map the render workers share is a leaf"},
	{pkg: module + "/internal/spec/...", forbid: []string{"github.com/envoyproxy/...", module + "/internal/xds/...", module + "/internal/catalog/..."},
		why: "the mesh specification stays free of Envoy so other front ends can be added"},
	{pkg: module + "/internal/spec", forbid: []string{module + "/internal/meshclient", module + "/internal/spec/specclient"},
		why: "spec's users on the server (rendering, the catalog) link no HTTP client; the CLI's client of the spec API is internal/spec/specclient"},
	{pkg: module + "/internal/spec/spechttp", forbid: []string{module + "/internal/meshclient", module + "/internal/spec/specclient"},
		why: "the server's handler of the spec API links no HTTP client either"},
	{pkg: module + "/internal/spec/specstore", forbid: []string{module + "/..."}, allow: []string{module + "/internal/spec/specstore", module + "/internal/mesh", module + "/internal/store"},
		why: "the stored layout of the specification knows items and bytes over the store contract, not documents: spec decodes them and imports specstore, never the other way"},
	{pkg: module + "/internal/spec/gateway", forbid: []string{module + "/..."}, allow: []string{module + "/internal/spec/gateway", module + "/internal/mesh"},
		why: "the Gateway API's field rules work on the upstream types alone: spec imports them and hands in what it shares through gateway.Checker, never the other way"},
	{pkg: module + "/internal/spec/resilience", forbid: []string{module + "/..."}, allow: []string{module + "/internal/spec/resilience", module + "/internal/mesh"},
		why: "failure handling's wire types, field rules and precedence are a leaf: spec imports them and hands in what it shares through resilience.Checker, never the other way; rendering reads its effective types"},
	{pkg: module + "/internal/spec/resilienceview", forbid: []string{module + "/..."}, allow: []string{module + "/internal/spec/resilienceview", module + "/internal/spec", module + "/internal/spec/gateway", module + "/internal/spec/resilience", module + "/internal/spec/specstore", module + "/internal/mesh", module + "/internal/meshapi", module + "/internal/store"},
		why: "what governs a call is read from spec's queries and shown: no HTTP edge, no client, no rendering; the server's handler, the CLI and the dashboard import it"},
	{pkg: module + "/internal/spec/specclient", forbid: []string{module + "/internal/spec/spechttp"},
		why: "the CLI's client of the spec API shares the API's wire types (in spec) with the server, not the server's handler"},
	{pkg: module + "/internal/ejections", forbid: []string{module + "/..."}, allow: []string{module + "/internal/ejections", module + "/internal/meshapi", module + "/internal/mesh"},
		why: "the agents' ejection reports are kept apart from the xDS server: the API fills them and the dashboard reads them, off the configuration hot path"},
	{pkg: module + "/internal/cli", forbid: []string{module + "/..."}, allow: []string{module + "/internal/cli"},
		why: "the commands' shared edge (logger flags, version) imports nothing of ours"},
	{pkg: module + "/internal/atomicfile", forbid: []string{module + "/..."}, allow: []string{module + "/internal/atomicfile"},
		why: "atomic file replacement is a leaf, shared by the server and the agent"},
	{pkg: module + "/internal/keylock", forbid: []string{module + "/..."}, allow: []string{module + "/internal/keylock"},
		why: "per-key locks and retry backoff are a leaf, shared by the CA and enrollment"},
	{pkg: module + "/internal/clip", forbid: []string{module + "/..."}, allow: []string{module + "/internal/clip"},
		why: "bounding outside text is a leaf, shared by the xDS server and the dashboard"},
	{pkg: module + "/internal/store", forbid: []string{module + "/...", "go.etcd.io/bbolt/...", "github.com/hashicorp/consul/..."}, allow: []string{module + "/internal/store"},
		why:       "internal/store is the contract only: keys, versions and bytes, nothing of the mesh and no storage engine (bbolt is in boltstore, Consul in consulstore)",
		testAllow: []string{module + "/internal/store/storetest"},
		testWhy:   "every backend's tests run the store contract's conformance suite"},
	{pkg: module + "/internal/store/boltstore", forbid: []string{module + "/..."}, allow: []string{module + "/internal/store", module + "/internal/store/boltstore"},
		why:       "the bbolt backend implements the store contract and knows nothing of the mesh",
		testAllow: []string{module + "/internal/store/storetest"},
		testWhy:   "every backend's tests run the store contract's conformance suite"},
	{pkg: module + "/internal/spec", forbid: []string{"go.etcd.io/bbolt/...", module + "/internal/store/boltstore", module + "/internal/store/consulstore"},
		why:       "the specification names the store contract, not a backend: what links spec links no storage engine",
		testAllow: []string{"go.etcd.io/bbolt/...", module + "/internal/store/boltstore"},
		testWhy:   "the restart tests reopen a real bbolt file"},
	{pkg: module + "/internal/catalog/...", forbid: []string{"go.etcd.io/bbolt/...", module + "/internal/store/boltstore", module + "/internal/store/consulstore"},
		why: "the catalog names the store contract through spec, never a storage engine"},
	{pkg: module + "/internal/xds/render/...", forbid: []string{"go.etcd.io/bbolt/...", module + "/internal/store/boltstore", module + "/internal/store/consulstore"},
		why: "rendering is pure and links no storage engine"},
	{pkg: module + "/internal/dashboard/...", forbid: []string{"go.etcd.io/bbolt/...", module + "/internal/store/boltstore", module + "/internal/store/consulstore"},
		why: "the dashboard reads the mesh through its own interfaces and links no storage engine"},
	{pkg: module + "/internal/certificate/...", forbid: []string{module + "/..."}, allow: []string{module + "/internal/certificate/...", module + "/internal/keylock", module + "/internal/mesh", module + "/internal/meshapi", module + "/internal/store"},
		why:       "the CA needs only mesh identities, the wire package's CA hash, the store and per-key locks",
		testAllow: []string{module + "/internal/store/boltstore", module + "/internal/testlog"},
		testWhy:   "the restart and claim tests run on a real bbolt file and read what the manager logged"},
	{pkg: module + "/internal/presence", forbid: []string{module + "/..."}, allow: []string{module + "/internal/presence", module + "/internal/mesh", module + "/internal/store"},
		why:       "sharing connected proxies between replicas needs only mesh values and the store contract; the model is behind a one-method interface",
		testAllow: []string{module + "/internal/testlog"},
		testWhy:   "the tests read what the sharer logged"},
	{pkg: module + "/internal/enroll/...", forbid: []string{module + "/..."}, allow: []string{module + "/internal/enroll/...", module + "/internal/keylock", module + "/internal/mesh", module + "/internal/meshapi", module + "/internal/store"},
		why:       "enrollment is the server side only: it declares the issuer it needs instead of importing the CA, and the client side is internal/meshclient",
		testAllow: []string{module + "/internal/meshclient", module + "/internal/certificate", module + "/internal/store/boltstore"},
		testWhy:   "the handlers are tested with the real client, and the flood tests with the real CA on a real bbolt file"},
	{pkg: module + "/internal/meshapi", forbid: []string{module + "/..."}, allow: []string{module + "/internal/meshapi", module + "/internal/mesh"},
		why: "the HTTPS API's wire documents are shared by server and clients, so they import nothing of either side"},
	{pkg: module + "/internal/meshclient", forbid: []string{module + "/..."}, allow: []string{module + "/internal/meshclient", module + "/internal/meshapi", module + "/internal/mesh"},
		why: "the client of the HTTPS API (osm-agent, the CLI) links no server package: no store, enroll, certificate, spec or api"},
	{pkg: module + "/internal/xds/render/...", forbid: []string{module + "/..."}, allow: []string{module + "/internal/xds/render/...", module + "/internal/mesh", module + "/internal/meshapi", module + "/internal/spec", module + "/internal/spec/gateway", module + "/internal/spec/resilience", module + "/internal/spec/specstore", module + "/internal/catalog", module + "/internal/store", module + "/internal/xds/shard"},
		why:       "rendering is pure: mesh state in, Envoy resources out, no I/O or serving (store and specstore come with spec, whose Store interface names the store contract's KV and Op; render calls none of it; its Memo's maps are shard.Maps)",
		testAllow: []string{module + "/internal/store", module + "/internal/xds/cache"},
		testWhy:   "the tests publish rendered resources into the real xDS cache, and the specification they render from lives in an in-memory store"},
	{pkg: module + "/internal/dnspublish", forbid: []string{module + "/..."}, allow: []string{module + "/internal/dnspublish", module + "/internal/catalog", module + "/internal/mesh", module + "/internal/meshapi", module + "/internal/spec", module + "/internal/spec/gateway", module + "/internal/spec/resilience", module + "/internal/spec/specstore", module + "/internal/store"},
		why: "DNS publishing reads the mesh model's views and talks DNS; it knows nothing of xDS, the API or the CA (meshapi, store and specstore come with spec and the catalog)"},
	{pkg: module + "/internal/agent/...", forbid: []string{module + "/internal/store/...", "go.etcd.io/bbolt/...", module + "/internal/enroll/...", module + "/internal/certificate/...", module + "/internal/spec/...", module + "/internal/catalog/...", module + "/internal/xds/...", module + "/internal/pluginhost/...", module + "/internal/api/..."},
		why: "osm-agent imports no store: the agent runs on every VM and talks to the server only over its APIs, through internal/meshclient"},
	{pkg: module + "/internal/agent/localxds", forbid: []string{module + "/..."}, allow: []string{module + "/internal/agent/localxds"},
		why:       "the local xDS endpoint knows gRPC and xDS, not the agent: credentials, metadata and servers come in through Options",
		testAllow: []string{module + "/internal/agent/...", module + "/internal/meshclient", module + "/internal/meshapi", module + "/internal/mesh", module + "/internal/atomicfile"},
		testWhy:   "its tests run against agenttest's mTLS ADS server and CA (agenttest brings the agent's client side)"},
	{pkg: module + "/cmd/osm-agent", forbid: []string{module + "/internal/store/...", "go.etcd.io/bbolt/...", module + "/internal/enroll/...", module + "/internal/certificate/...", module + "/internal/spec/...", module + "/internal/catalog/...", module + "/internal/xds/...", module + "/internal/pluginhost/...", module + "/internal/api/..."},
		why:       "osm-agent imports no store: the agent binary links only the client side (internal/agent, internal/meshclient, internal/meshapi)",
		testAllow: []string{module + "/internal/enroll/...", module + "/internal/store/...", "go.etcd.io/bbolt/..."},
		testWhy:   "the enroll command is tested end to end against the real enrollment handlers on an in-memory store"},
	{pkg: module + "/internal/httpserve", forbid: []string{module + "/..."}, allow: []string{module + "/internal/httpserve", module + "/internal/meshapi", module + "/internal/mesh"},
		why: "the HTTP listeners' bounds and Host check are shared by osm-server and osm-agent, so they import nothing of either side (meshapi, for the error body, is the wire package both share)"},
	{pkg: module + "/internal/join", forbid: []string{module + "/..."}, allow: []string{module + "/internal/join", module + "/internal/mesh"},
		why: "the join routes serve a CA, a script and files: they know no store, CA or enrollment"},
	{pkg: module + "/internal/dashboard", forbid: []string{module + "/internal/xds/...", module + "/internal/certificate/...", module + "/internal/store/...", module + "/internal/api/...", module + "/internal/enroll/..."}, allow: []string{module + "/internal/store"},
		why: "the dashboard reads the mesh through the interfaces it declares; osm-server adapts the xDS server and the CA to them (the store contract, not a backend, comes with spec, whose Store interface names its KV and Op)"},
	{pkg: module + "/internal/gctune", forbid: []string{module + "/..."}, allow: []string{module + "/internal/gctune"},
		why: "the collector's tuning is a leaf: the server's load comes in as a function, so it imports nothing of the mesh"},
	{pkg: module + "/internal/...", forbid: []string{module + "/cmd/...", module + "/providers/..."},
		why: "libraries never import binaries"},
	{pkg: module + "/...", forbid: []string{module + "/bench/...", "golang.org/x/exp/trace", "github.com/envoyproxy/go-control-plane/pkg/server/v3"}, allow: []string{module + "/bench/..."},
		why:       "the benchmark harness and what only it links (go-control-plane's server for L, x/exp/trace for tails) stay out of the product",
		testAllow: []string{"github.com/envoyproxy/go-control-plane/pkg/server/v3"},
		testWhy:   "xDS tests run go-control-plane's server as a reference"},
	{pkg: module + "/bench/...", forbid: []string{module + "/..."}, allow: []string{module + "/bench/...", module + "/internal/mesh", module + "/internal/meshapi", module + "/internal/meshclient", module + "/internal/testaddr"},
		why:       "the benchmark harness is a client of the product: of osm-vm it links only the wire and client packages an agent links, and runs osm-server as a process",
		testAllow: []string{module + "/internal/store/consultest"},
		testWhy:   "the HA section's test runs a real Consul"},
	{pkg: module + "/bench/fleet", forbid: []string{module + "/..."}, allow: []string{module + "/bench/fleet", module + "/bench/wire", module + "/bench/workload", module + "/bench/pki", module + "/bench/process"},
		why: "the fleet is the same whichever server it fills: it knows no server under test and nothing of osm-vm"},
	{pkg: module + "/bench/wire", forbid: []string{module + "/..."}, allow: []string{module + "/bench/wire"},
		why: "a leaf of the harness", testAllow: []string{module + "/bench/workload"}, testWhy: "its round trip reads W's resources"},
	{pkg: module + "/bench/workload", forbid: []string{module + "/..."}, allow: []string{module + "/bench/workload"},
		why: "a leaf of the harness"},
	{pkg: module + "/bench/pki", forbid: []string{module + "/..."}, allow: []string{module + "/bench/pki"},
		why: "a leaf of the harness"},
	{pkg: module + "/bench/process", forbid: []string{module + "/..."}, allow: []string{module + "/bench/process"},
		why: "a leaf of the harness"},
	{pkg: module + "/bench/report", forbid: []string{module + "/..."}, allow: []string{module + "/bench/report"},
		why: "a leaf of the harness"},
	{pkg: module + "/bench/tails", forbid: []string{module + "/..."}, allow: []string{module + "/bench/tails"},
		why: "a leaf of the harness"},
	{pkg: module + "/internal/testrig/...", forbid: []string{module + "/..."}, allow: []string{module + "/internal/testrig"},
		why: "the resilience rig's backend and callers are ordinary gRPC programs: of osm-vm they link nothing, and tests reach them through their processes"},
	{pkg: module + "/...", forbid: []string{module + "/internal/testrig/..."},
		why:       "the resilience rig is test support: no product package links it",
		testAllow: []string{module + "/internal/testrig"},
		testWhy:   "the resilience tests drive the rig's processes with its control client and its caller driver"},
	{pkg: "...", forbid: []string{"k8s.io/client-go/..."}, allow: []string{},
		why: "only providers/kubernetes may import client-go"},
	{pkg: "...", forbid: []string{"github.com/Azure/azure-sdk-for-go/..."},
		why: "only providers/azure may import the Azure SDK"},
	{pkg: module + "/providers/...", forbid: []string{"github.com/hashicorp/consul/..."},
		why: "among the providers only providers/consul talks to Consul"},
	{pkg: module + "/cmd/osm-agent", forbid: []string{"sigs.k8s.io/gateway-api/...", "k8s.io/api/..."},
		why: "the Gateway API and Kubernetes types are the server's specification's; the agent links none"},
	{pkg: "...", forbid: []string{"github.com/servicemeshinterface/smi-sdk-go/..."},
		why: "SMI types are defined locally (smi-sdk-go is unmaintained and breaks with current client-go)"},
}

// testSupport may be imported by any package's tests, whatever the
// package's rule: it holds nothing of the mesh and links into no binary.
// internal/testwait bounds every test's waits by the test run's deadline,
// the public SDK's and the plugins' included; internal/testaddr picks the
// loopback ports of servers tests start in other processes;
// internal/spec/spectest writes hostile documents (strings only).
var testSupport = []string{module + "/internal/testwait", module + "/internal/testaddr", module + "/internal/spec/spectest"}

// exempt packages from "..." rules.
var exempt = map[string][]string{
	"k8s.io/client-go/...":                                 {module + "/providers/kubernetes/..."},
	"github.com/Azure/azure-sdk-for-go/...":                {module + "/providers/azure/..."},
	"github.com/hashicorp/consul/...":                      {module + "/providers/consul/..."},
	"golang.org/x/exp/trace":                               {module + "/bench/..."},
	"github.com/envoyproxy/go-control-plane/pkg/server/v3": {module + "/bench/..."},
	module + "/internal/testrig/...":                       {module + "/internal/testrig/..."},
}

var bannedNames = []string{"utils", "util", "common", "types", "constants", "models", "helpers"}

type pkgInfo struct {
	ImportPath string
	Deps       []string
	// Test is set for a package compiled with its tests: the package with
	// its _test.go files, or its external _test package.
	Test bool
}

func listPackages(t *testing.T) []pkgInfo {
	t.Helper()
	out, err := exec.Command("go", "list", "-e", "-json", "-test", "./...").Output()
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
		// go list -test adds "p [p.test]" (p with its tests), "p_test
		// [p.test]" (its external tests) and "p.test" (the generated main,
		// which adds nothing the other two do not hold); Deps name the
		// test builds of packages the same way.
		name, variant, _ := strings.Cut(p.ImportPath, " ")
		if variant == "" && strings.HasSuffix(name, ".test") {
			continue
		}
		if variant != "" {
			p.Test = true
			name = strings.TrimSuffix(name, "_test")
		}
		p.ImportPath = name
		for i, d := range p.Deps {
			p.Deps[i], _, _ = strings.Cut(d, " ")
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
				if p.Test && (anyMatch(r.testAllow, dep) || anyMatch(testSupport, dep)) {
					continue
				}
				exempted := false
				for _, f := range r.forbid {
					if anyMatch(exempt[f], p.ImportPath) {
						exempted = true
					}
				}
				if !exempted {
					what := p.ImportPath
					if p.Test {
						what += " (with its tests)"
					}
					t.Errorf("%s depends on %s: %s", what, dep, r.why)
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
