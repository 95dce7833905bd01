package render

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/catalog"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
)

const trustDomain = "osm.local"

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func svc(name string) mesh.MeshService { return mesh.MeshService{Namespace: "default", Name: name} }

// bookstoreSpec applies examples/bookstore/mesh.yaml (with permissive mode
// set as asked) to a real spec.Spec on an in-memory store.
func bookstoreSpec(t *testing.T, permissive bool) *spec.Spec {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "bookstore", "mesh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	y := string(b)
	if permissive {
		if !strings.Contains(y, "permissive: false") {
			t.Fatal("mesh.yaml no longer says permissive: false; update the test")
		}
		y = strings.Replace(y, "permissive: false", "permissive: true", 1)
	}
	s, err := spec.New(t.Context(), discard(), store.NewMemory())
	if err != nil {
		t.Fatal(err)
	}
	applyYAML(t, s, y)
	return s
}

// newSpecFromYAML returns a spec.Spec on an in-memory store holding y.
func newSpecFromYAML(t *testing.T, y string) (*spec.Spec, error) {
	t.Helper()
	s, err := spec.New(t.Context(), discard(), store.NewMemory())
	if err != nil {
		return nil, err
	}
	applyYAML(t, s, y)
	return s, nil
}

func applyYAML(t *testing.T, s *spec.Spec, y string) {
	t.Helper()
	docs, err := spec.Parse([]byte(y), "test.yaml")
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Apply(t.Context(), docs, spec.ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
}

// bookstoreEndpoints parses examples/bookstore/endpoints.yaml.
func bookstoreEndpoints(t *testing.T) map[mesh.MeshService][]mesh.Endpoint {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "bookstore", "endpoints.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var f struct {
		Services []struct {
			Name, Namespace string
			Endpoints       []struct {
				IP     string
				Port   uint16
				Labels map[string]string
			}
		}
	}
	if err := yaml.Unmarshal(b, &f); err != nil {
		t.Fatal(err)
	}
	out := map[mesh.MeshService][]mesh.Endpoint{}
	for _, s := range f.Services {
		ms := mesh.MeshService{Namespace: s.Namespace, Name: s.Name}
		for _, e := range s.Endpoints {
			out[ms] = append(out[ms], mesh.Endpoint{IP: netip.MustParseAddr(e.IP), Port: e.Port, Labels: e.Labels, Provider: "static"})
		}
	}
	if len(out) == 0 {
		t.Fatal("endpoints.yaml holds no endpoints")
	}
	return out
}

func meshOf(s *spec.Snapshot, eps map[mesh.MeshService][]mesh.Endpoint) Mesh {
	return meshIn(s, eps, trustDomain)
}

func meshIn(s *spec.Snapshot, eps map[mesh.MeshService][]mesh.Endpoint, td string) Mesh {
	return Mesh{View: catalog.NewView(s, td, eps)}
}

// resources is one proxy's complete rendering.
type resources struct {
	Listeners []proto.Message
	Routes    []proto.Message
	Clusters  []proto.Message
	Endpoints []proto.Message
	Secrets   []proto.Message
}

func (r resources) all() []proto.Message {
	var out []proto.Message
	for _, l := range [][]proto.Message{r.Listeners, r.Routes, r.Clusters, r.Endpoints, r.Secrets} {
		out = append(out, l...)
	}
	return out
}

var (
	testCertPEM = []byte("-----BEGIN CERTIFICATE-----\nc2VydmljZQ==\n-----END CERTIFICATE-----\n")
	testKeyPEM  = []byte("-----BEGIN PRIVATE KEY-----\na2V5\n-----END PRIVATE KEY-----\n")
	testRootPEM = []byte("-----BEGIN CERTIFICATE-----\ncm9vdA==\n-----END CERTIFICATE-----\n")
)

func msgs[T proto.Message](s []T) []proto.Message {
	out := make([]proto.Message, len(s))
	for i, m := range s {
		out[i] = m
	}
	return out
}

// renderAll renders every resource type for p (secrets from test PEM for Envoy).
func renderAll(t *testing.T, m Mesh, p Proxy) resources {
	t.Helper()
	var r resources
	ls, err := Listeners(m, p)
	if err != nil {
		t.Fatalf("Listeners: %v", err)
	}
	rs, err := Routes(m, p)
	if err != nil {
		t.Fatalf("Routes: %v", err)
	}
	cs, err := Clusters(m, p)
	if err != nil {
		t.Fatalf("Clusters: %v", err)
	}
	es, err := LoadAssignments(m, p)
	if err != nil {
		t.Fatalf("LoadAssignments: %v", err)
	}
	r.Listeners, r.Routes, r.Clusters, r.Endpoints = msgs(ls), msgs(rs), msgs(cs), msgs(es)
	if p.Flavor != GRPC {
		ss, err := Secrets(testCertPEM, testKeyPEM, testRootPEM)
		if err != nil {
			t.Fatalf("Secrets: %v", err)
		}
		r.Secrets = msgs(ss)
	}
	return r
}

// goldenJSON is a stable, indented JSON form of r: protojson of each
// message, normalised through encoding/json (sorted keys).
func goldenJSON(t *testing.T, r resources) []byte {
	t.Helper()
	conv := func(ms []proto.Message) []any {
		out := []any{}
		for _, m := range ms {
			b, err := protojson.Marshal(m)
			if err != nil {
				t.Fatal(err)
			}
			var v any
			if err := json.Unmarshal(b, &v); err != nil {
				t.Fatal(err)
			}
			out = append(out, v)
		}
		return out
	}
	doc := map[string]any{
		"listeners": conv(r.Listeners),
		"routes":    conv(r.Routes),
		"clusters":  conv(r.Clusters),
		"endpoints": conv(r.Endpoints),
		"secrets":   conv(r.Secrets),
	}
	b, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(b, '\n')
}
