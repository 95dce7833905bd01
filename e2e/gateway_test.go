//go:build polyglot && linux

package e2e

import (
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	xdscreds "google.golang.org/grpc/credentials/xds"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/xds"

	"github.com/osm-vm/osm-vm/examples/bookstore/bookapi"
	"github.com/osm-vm/osm-vm/internal/testlog"
	"github.com/osm-vm/osm-vm/internal/testwait"
)

// TestPolyglotGatewayAPI: the bookstore in Gateway API form
// (examples/bookstore/gateway-api/mesh.yaml: v1 Services, a GRPCRoute)
// applied to a real osm-server; the Go bookstore-v1 and -v2 servers and a
// gRPC-Go xDS client (in this process, with the bootstrap of a real
// bookbuyer agent) follow it: the GRPCRoute's 80/20 split over 1,000 calls,
// its header match, then an HTTPRoute's 50/50 split once the GRPCRoute
// (which takes precedence on a gRPC port) is deleted. Only Go: it runs
// with the polyglot suite because it shares its machinery.
func TestPolyglotGatewayAPI(t *testing.T) {
	dir := t.TempDir()
	p := &polyglot{t: t, dir: dir, bin: filepath.Join(dir, "bin"), logs: map[string]*testlog.Buffer{}}
	t.Cleanup(func() {
		if t.Failed() {
			for name, l := range p.logs {
				t.Logf("== %s\n%s", name, l)
			}
		}
	})
	p.serve(bookstoreEndpoints(false), "bookstore", "./examples/bookstore/bookstore")
	out := p.admin("apply", "-f", "../examples/bookstore/gateway-api/mesh.yaml")
	t.Logf("apply:\n%s", out)

	for _, s := range []struct{ name, addr string }{{"bookstore-v1", "127.0.30.3"}, {"bookstore-v2", "127.0.30.4"}} {
		boot := p.agent(s.name, s.addr, "bookstore")
		// No warehouse runs: restocking fails at once and BuyBook still answers.
		p.start("bookstore "+s.name, []string{boot}, io.Discard, filepath.Join(p.bin, "bookstore"), "-listen", s.addr+":14001", "-name", s.name, "-warehouse", "passthrough:///127.0.0.1:9")
		waitLog(t, s.name+" serving", p.logs["bookstore "+s.name], func(l string) bool { return strings.Contains(l, bookapi.ServingMarker) })
	}
	boot, err := os.ReadFile(strings.TrimPrefix(p.agent("bookbuyer", "127.0.30.1"), "GRPC_XDS_BOOTSTRAP="))
	if err != nil {
		t.Fatal(err)
	}
	rb, err := xds.NewXDSResolverWithConfigForTesting(boot)
	if err != nil {
		t.Fatal(err)
	}
	creds, err := xdscreds.NewClientCredentials(xdscreds.ClientOptions{FallbackCreds: insecure.NewCredentials()})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := grpc.NewClient(bookapi.BookstoreTarget, grpc.WithTransportCredentials(creds), grpc.WithResolvers(rb))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()

	// calls makes n BuyBook calls (with the header when given) and counts
	// the answers by server.
	calls := func(n int, header ...string) map[string]int {
		t.Helper()
		got := map[string]int{}
		for range n {
			ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
			if len(header) == 2 {
				ctx = metadata.AppendToOutgoingContext(ctx, header...)
			}
			from, err := bookapi.Call(ctx, conn, bookapi.BuyBookMethod, "a book")
			cancel()
			if err != nil {
				got[err.Error()]++
				continue
			}
			got[from]++
		}
		return got
	}
	testwait.For(t, "20 calls in a row answered", func() bool { n := calls(20); return n["bookstore-v1"]+n["bookstore-v2"] == 20 })
	within := func(what string, n map[string]int, want float64) {
		t.Helper()
		v1 := float64(n["bookstore-v1"]) / 1000
		t.Logf("%s: %v (v1 %.1f%%)", what, n, 100*v1)
		if v1 < want-0.05 || v1 > want+0.05 || n["bookstore-v1"]+n["bookstore-v2"] != 1000 {
			t.Errorf("%s: %v over 1,000 calls, want %.0f%% ±5 on bookstore-v1, the rest on bookstore-v2, no errors", what, n, 100*want)
		}
	}
	within("GRPCRoute 80/20", calls(1000), 0.8)
	if n := calls(200, "x-bookstore-version", "v2"); n["bookstore-v2"] != 200 {
		t.Errorf("calls with x-bookstore-version: v2: %v, want all 200 on bookstore-v2", n)
	}

	// The route's status, as a Kubernetes controller reports it.
	var route struct {
		Status struct {
			Parents []struct {
				Conditions []struct{ Type, Status, Reason string }
			}
		}
	}
	if err := json.Unmarshal([]byte(p.admin("get", "grpcroutes", "bookstore", "-o", "json")), &route); err != nil {
		t.Fatal(err)
	}
	if len(route.Status.Parents) != 1 || len(route.Status.Parents[0].Conditions) != 2 ||
		route.Status.Parents[0].Conditions[0].Status != "True" || route.Status.Parents[0].Conditions[1].Status != "True" {
		t.Errorf("GRPCRoute status = %+v, want Accepted and ResolvedRefs True", route.Status)
	}

	// An HTTPRoute on the same port waits while the GRPCRoute takes
	// precedence, and routes once it is deleted.
	httpRoute := filepath.Join(dir, "httproute.yaml")
	os.WriteFile(httpRoute, []byte(`apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: bookstore, namespace: default}
spec:
  parentRefs: [{group: "", kind: Service, name: bookstore, port: 14001}]
  rules:
  - matches: [{path: {type: PathPrefix, value: /bookstore.Bookstore}}]
    backendRefs:
    - {name: bookstore-v1, port: 14001, weight: 50}
    - {name: bookstore-v2, port: 14001, weight: 50}
`), 0o644)
	p.admin("apply", "-f", httpRoute)
	p.admin("delete", "grpcroutes", "bookstore")
	testwait.For(t, "the HTTPRoute's split", func() bool { n := calls(200); return n["bookstore-v1"] > 60 && n["bookstore-v1"] < 140 })
	within("HTTPRoute 50/50", calls(1000), 0.5)
}
