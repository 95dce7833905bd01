//go:build k8sintegration && linux

package main

// Integration tests against a real kube-apiserver and etcd. Run with
//
//	OSM_KUBE_BIN_DIR=$(hack/build-kube-apiserver.sh | tail -1) \
//	  go test -tags k8sintegration ./providers/kubernetes/

import (
	"context"
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"

	"github.com/osm-vm/osm-vm/internal/testwait"
	"github.com/osm-vm/osm-vm/provider"
	"github.com/osm-vm/osm-vm/provider/providertest"
)

// realHarness runs the conformance suite against the real API server: a
// fresh Kubernetes namespace per case, mapped to the suite's mesh
// namespace "conformance" by namespaceMap and watched through a kubeconfig
// file, in-process or as a real plugin subprocess.
type realHarness struct {
	cp     *controlPlane
	plugin string // path of the built osm-provider-kubernetes; "" runs in-process
}

func (h realHarness) MakeProvider(ctx context.Context, t *testing.T) (provider.Provider, providertest.Backend) {
	ns := h.cp.namespace(ctx, t)
	cfg, err := json.Marshal(map[string]any{
		"kubeconfig":   h.cp.kubeconfig,
		"namespaces":   []string{ns},
		"namespaceMap": map[string]string{ns: "conformance"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var p provider.Provider
	if h.plugin == "" {
		kp := newProvider(testLogger(t), newClientset)
		t.Cleanup(func() { kp.Close() })
		p = kp
	} else {
		p = providertest.StartPlugin(t, exec.Command(h.plugin))
	}
	if err := p.Configure(ctx, "it", cfg); err != nil {
		t.Fatalf("Configure: %v", err)
	}
	return p, kubeBackend{client: h.cp.client, k8sNamespace: func(string) string { return ns }}
}

func TestConformanceRealAPIServer(t *testing.T) {
	cp := startControlPlane(t)
	providertest.Run(t, realHarness{cp: cp})
}

func TestConformanceRealPluginSubprocess(t *testing.T) {
	bin := filepath.Join(t.TempDir(), "osm-provider-kubernetes")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build the plugin: %v\n%s", err, out)
	}
	cp := startControlPlane(t)
	providertest.Run(t, realHarness{cp: cp, plugin: bin})
}

// TestRealInformers checks what the fake clientset cannot: the API
// server's validation of the objects, server-side label selection, watch
// latency, and an API server restart.
func TestRealInformers(t *testing.T) {
	cp := startControlPlane(t)

	t.Run("multi-port service, terminating pods, latency", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ns := cp.namespace(ctx, t)
		p := startReal(ctx, t, cp, map[string]any{"namespaces": []string{ns}})
		events := watchEvents(ctx, t, p)
		mesh := ns + "/web"
		svc := service(ns, "web", svcPort("http", 80, intstr.FromString("web")), svcPort("metrics", 9090, intstr.FromInt32(9090)))
		writeAll(ctx, t, cp, svc,
			slice(ns, "web-1", "web", ports(slicePortOf("http", 8080), slicePortOf("metrics", 9090)),
				endpoint("192.0.2.1", ready(true), pod("web-1"), node("n1"), zone("z1")), endpoint("192.0.2.2", terminating(true))),
			slice(ns, "web-2", "web", ports(slicePortOf("http", 8081), slicePortOf("metrics", 9090)), endpoint("192.0.2.3")))
		want := map[string][]string{mesh: {
			"192.0.2.1:8080 k8s-pod=web-1 node=n1 port-name=http zone=z1", "192.0.2.1:9090 k8s-pod=web-1 node=n1 port-name=metrics zone=z1",
			"192.0.2.3:8081 port-name=http", "192.0.2.3:9090 port-name=metrics",
		}}
		waitState(t, events, want)

		// Latency: from the API server acknowledging the write to the watcher
		// having the event.
		var worst time.Duration
		var lat []time.Duration
		for i := range 5 {
			ip := fmt.Sprintf("192.0.2.%d", 10+i)
			writeAll(ctx, t, cp, slice(ns, "web-2", "web", ports(slicePortOf("http", 8081), slicePortOf("metrics", 9090)), endpoint("192.0.2.3"), endpoint(ip)))
			start := time.Now()
			waitFor(t, "scale-out event", func() string {
				got, _ := events.snapshot()
				if !strings.Contains(strings.Join(got[mesh], ","), ip+":8081") {
					return fmt.Sprintf("state %v", got[mesh])
				}
				return ""
			})
			took := time.Since(start)
			lat = append(lat, took.Round(time.Millisecond))
			worst = max(worst, took)
		}
		t.Logf("write-to-watch-event latency: %v", lat)
		if worst > time.Second {
			t.Errorf("a change took %v from the API write to the watcher; want under 1s", worst)
		}
	})

	t.Run("server-side label selector", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		ns := cp.namespace(ctx, t)
		p := startReal(ctx, t, cp, map[string]any{"namespaces": []string{ns}, "labelSelector": "mesh=on"})
		events := watchEvents(ctx, t, p)
		writeAll(ctx, t, cp,
			withLabels(service(ns, "web", svcPort("http", 80, intstr.FromInt32(8080))), "mesh", "on"),
			slice(ns, "web-1", "web", http8080, endpoint("192.0.2.1")),
			service(ns, "db", svcPort("", 5432, intstr.FromInt32(5432))),
			slice(ns, "db-1", "db", ports(slicePortOf("", 5432)), endpoint("192.0.2.2")))
		waitState(t, events, map[string][]string{ns + "/web": {"192.0.2.1:8080 port-name=http"}})
		// Relabelled: the API server's watch reports the Service deleted.
		writeAll(ctx, t, cp, withLabels(service(ns, "web", svcPort("http", 80, intstr.FromInt32(8080))), "mesh", "off"))
		waitState(t, events, map[string][]string{})
	})

	t.Run("API server crash and restart: stale endpoints kept, then resumes", func(t *testing.T) {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		ns := cp.namespace(ctx, t)
		p := startReal(ctx, t, cp, map[string]any{"namespaces": []string{ns}})
		events := watchEvents(ctx, t, p)
		mesh := ns + "/web"
		writeAll(ctx, t, cp, service(ns, "web", svcPort("http", 80, intstr.FromInt32(8080))),
			slice(ns, "web-1", "web", http8080, endpoint("192.0.2.1")))
		want := map[string][]string{mesh: {"192.0.2.1:8080 port-name=http"}}
		waitState(t, events, want)

		down := time.Now()
		cp.crashAPIServer()
		waitHealth(t, events, false)
		t.Logf("unhealthy reported %v after the API server stopped", time.Since(down).Round(time.Millisecond))
		h := events.healthEvents()
		t.Logf("health message: %s", h[len(h)-1].Message)
		if got, err := snapshot(ctx, p, false); err != nil || !cmp.Equal(want, got) {
			t.Errorf("with the API server down: List = %v, %v; want the last good %v", got, err, want)
		}

		cp.startAPIServer()
		// Changed before the provider has reconnected (its informers back
		// off): it must pick this up by re-listing, without a restart.
		writeAll(ctx, t, cp, slice(ns, "web-1", "web", http8080, endpoint("192.0.2.1"), endpoint("192.0.2.2")))
		up := time.Now()
		waitHealth(t, events, true)
		want = map[string][]string{mesh: {"192.0.2.1:8080 port-name=http", "192.0.2.2:8080 port-name=http"}}
		waitState(t, events, want)
		t.Logf("healthy and current %v after the API server was back", time.Since(up).Round(time.Millisecond))

		// And it keeps following changes.
		writeAll(ctx, t, cp, slice(ns, "web-1", "web", http8080, endpoint("192.0.2.2")))
		waitState(t, events, map[string][]string{mesh: {"192.0.2.2:8080 port-name=http"}})
	})
}

func startReal(ctx context.Context, t *testing.T, cp *controlPlane, cfg map[string]any) *provider.Plugin {
	t.Helper()
	cfg["kubeconfig"] = cp.kubeconfig
	raw, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := newProvider(testLogger(t), newClientset)
	t.Cleanup(func() { p.Close() })
	if err := p.Configure(ctx, "it", raw); err != nil {
		t.Fatalf("Configure(%s): %v", raw, err)
	}
	// Watch before writing: Configure returns once the informers synced,
	// and their watches start right after the initial list.
	return p
}

func writeAll(ctx context.Context, t *testing.T, cp *controlPlane, objs ...runtime.Object) {
	t.Helper()
	for _, o := range objs {
		if err := apply(ctx, cp.client, o, false); err != nil {
			t.Fatalf("write %T: %v", o, err)
		}
	}
}

func waitState(t *testing.T, events *eventLog, want map[string][]string) {
	t.Helper()
	testwait.Until(t, "state folded from Watch events as wanted", func() (bool, string) {
		got, _ := events.snapshot()
		diff := cmp.Diff(want, got)
		return diff == "", "(-want +got):\n" + diff
	})
}

func waitHealth(t *testing.T, events *eventLog, healthy bool) {
	t.Helper()
	testwait.Until(t, fmt.Sprintf("a health event with healthy=%v", healthy), func() (bool, string) {
		h := events.healthEvents()
		return len(h) > 0 && h[len(h)-1].Healthy == healthy, fmt.Sprintf("health events: %+v", h)
	})
}
