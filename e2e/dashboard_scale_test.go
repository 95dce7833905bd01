package e2e

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// scaleServices is how many services TestDashboardAtScale's mesh has.
const scaleServices = 1000

// TestDashboardAtScale loads the dashboard of a real osm-server whose
// mesh has 1,000 services (2 endpoints each from the static provider,
// about 5,000 permissions: every service may call service 0 and its four
// predecessors; 50 TrafficSplits) in headless Chromium
// (e2e/browser/scale.mjs): the page renders every service in the graph
// and the table, and a split change appears without a reload. It logs
// what it measured (load to rendered, an update's render, the state's
// size and fetch time); docs/operator-guide.md ("Observe") records those
// figures. It asserts no time: a loaded machine must not fail it.
func TestDashboardAtScale(t *testing.T) {
	pwDir, node := browserTools(t)
	dir := t.TempDir()
	bin := buildBinaries(t, dir, "osm-server", "osm-provider-static")
	endpoints, mesh, split := filepath.Join(dir, "endpoints.yaml"), filepath.Join(dir, "mesh.yaml"), filepath.Join(dir, "split.yaml")
	writeScaleMesh(t, scaleServices, endpoints, mesh, split)
	api, _, _, serverDir := writeServerConfigWith(t, dir, bin, endpoints)
	dashboardURL := startDashboardServer(t, dir, bin)
	osm := adminCLI{bin: bin, api: api, dataDir: serverDir}
	osm.apply(t, mesh)
	applyCmd, _ := json.Marshal(osm.cmd("apply", "-f", split))
	out := runBrowser(t, node, "browser/scale.mjs",
		"PLAYWRIGHT_DIR="+pwDir,
		"DASHBOARD_URL="+dashboardURL+"#token="+osm.token(t),
		"SERVICES="+fmt.Sprint(scaleServices),
		"APPLY="+string(applyCmd),
		"SCREENSHOT="+filepath.Join(t.ArtifactDir(), "dashboard-1000.png"))
	if !strings.Contains(out, "measured: ") {
		t.Errorf("scale.mjs printed no measurement")
	}
}

// writeScaleMesh writes n services' endpoints (for the static provider),
// their specification and a change to the first split.
func writeScaleMesh(t *testing.T, n int, endpoints, mesh, split string) {
	t.Helper()
	name := func(i int) string { return fmt.Sprintf("svc-%04d", i) }
	var eps, spec strings.Builder
	eps.WriteString("services:\n")
	spec.WriteString("apiVersion: osm-vm.io/v1alpha1\nkind: MeshConfig\nmetadata: {name: mesh}\nspec: {traffic: {permissive: false}, outbound: {vipRange: 127.77.0.0/16}}\n")
	spec.WriteString("---\napiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: all, namespace: scale}\nspec: {matches: [{name: all, pathRegex: '/.*'}]}\n")
	for i := range n {
		fmt.Fprintf(&eps, "  - name: %s\n    namespace: scale\n    endpoints:\n      - {ip: 10.%d.%d.1, port: 8080}\n      - {ip: 10.%d.%d.2, port: 8080}\n", name(i), i/250, i%250, i/250, i%250)
		fmt.Fprintf(&spec, "---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: %s, namespace: scale}\nspec: {ports: [{port: 8080, appProtocol: http}]}\n", name(i))
		var callers []string
		for c := i - 4; c < i; c++ {
			if c > 0 {
				callers = append(callers, c2sa(name(c)))
			}
		}
		if i == 0 {
			callers = nil
			for c := 1; c < n; c++ {
				callers = append(callers, c2sa(name(c)))
			}
		}
		if len(callers) > 0 {
			fmt.Fprintf(&spec, "---\napiVersion: access.smi-spec.io/v1alpha3\nkind: TrafficTarget\nmetadata: {name: to-%s, namespace: scale}\nspec:\n  destination: {kind: ServiceAccount, name: %s, namespace: scale}\n  rules: [{kind: HTTPRouteGroup, name: all}]\n  sources: [%s]\n", name(i), name(i), strings.Join(callers, ", "))
		}
	}
	splitDoc := func(i, w1, w2 int) string {
		return fmt.Sprintf("---\napiVersion: split.smi-spec.io/v1alpha4\nkind: TrafficSplit\nmetadata: {name: split-%s, namespace: scale}\nspec:\n  service: %s\n  backends: [{service: %s, weight: %d}, {service: %s, weight: %d}]\n", name(i), name(i), name(i+1), w1, name(i+2), w2)
	}
	for i := 0; i+2 < n && i < 50*20; i += 20 {
		spec.WriteString(splitDoc(i, 80, 20))
	}
	for f, b := range map[string]string{endpoints: eps.String(), mesh: spec.String(), split: splitDoc(0, 50, 50)} {
		if err := os.WriteFile(f, []byte(b), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}

// c2sa is the ServiceAccount subject of a service of the scale namespace.
func c2sa(name string) string { return "{kind: ServiceAccount, name: " + name + ", namespace: scale}" }
