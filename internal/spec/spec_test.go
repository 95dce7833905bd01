package spec

import (
	"io"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

func discard() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func bookstoreDocs(t *testing.T) []Document {
	t.Helper()
	path := filepath.Join("..", "..", "examples", "bookstore", "mesh.yaml")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	docs, err := Parse(data, "mesh.yaml")
	if err != nil {
		t.Fatalf("Parse(bookstore): %v", err)
	}
	return docs
}

func newTestSpec(t *testing.T, st Store) *Spec {
	t.Helper()
	s, err := New(t.Context(), discard(), st)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	return s
}

func actions(r BatchResult) map[string]Action {
	m := map[string]Action{}
	for _, x := range r.Results {
		m[x.Key.String()] = x.Action
	}
	return m
}

func allActions(docs []Document, a Action) map[string]Action {
	m := map[string]Action{}
	for _, d := range docs {
		m[d.Key().String()] = a
	}
	return m
}

func TestBookstoreApplyTwiceDelete(t *testing.T) {
	ctx := t.Context()
	s := newTestSpec(t, store.NewMemory())
	docs := bookstoreDocs(t)
	notify, cancel := s.Subscribe()
	defer cancel()

	res, err := s.Apply(ctx, docs, ApplyOptions{})
	if err != nil {
		t.Fatalf("first Apply: %v", err)
	}
	if diff := cmp.Diff(allActions(docs, Created), actions(res)); diff != "" {
		t.Errorf("first apply actions (-want +got):\n%s", diff)
	}
	for _, r := range res.Results {
		if len(r.Warnings) > 0 {
			t.Errorf("%s: unexpected warnings %q", r.Key, r.Warnings)
		}
	}
	select {
	case <-notify:
	default:
		t.Error("no notification after apply")
	}
	v1 := s.Snapshot().Version()

	res, err = s.Apply(ctx, bookstoreDocs(t), ApplyOptions{})
	if err != nil {
		t.Fatalf("second Apply: %v", err)
	}
	if diff := cmp.Diff(allActions(docs, Unchanged), actions(res)); diff != "" {
		t.Errorf("second apply actions (-want +got):\n%s", diff)
	}
	if got, want := s.Snapshot().Version(), v1; got != want {
		t.Errorf("version after unchanged apply = %d, want %d", got, want)
	}

	snap := s.Snapshot()
	bookstore := mesh.MeshService{Namespace: "default", Name: "bookstore"}
	split, ok := snap.Split(bookstore)
	if !ok {
		t.Fatal("no split for bookstore")
	}
	wantBackends := []WeightedService{
		{Service: mesh.MeshService{Namespace: "default", Name: "bookstore-v1"}, Weight: 80},
		{Service: mesh.MeshService{Namespace: "default", Name: "bookstore-v2"}, Weight: 20},
	}
	if diff := cmp.Diff(wantBackends, split.Backends); diff != "" {
		t.Errorf("split backends (-want +got):\n%s", diff)
	}
	gotUp := snap.Upstreams(mesh.ServiceAccount{Namespace: "default", Name: "bookbuyer"})
	wantUp := []mesh.MeshService{bookstore, {Namespace: "default", Name: "bookstore-v1"}, {Namespace: "default", Name: "bookstore-v2"}}
	if diff := cmp.Diff(wantUp, gotUp); diff != "" {
		t.Errorf("bookbuyer upstreams (-want +got):\n%s", diff)
	}
	if got := snap.Upstreams(mesh.ServiceAccount{Namespace: "default", Name: "bookthief"}); len(got) != 0 {
		t.Errorf("bookthief upstreams = %v, want none", got)
	}
	gotSrc := snap.AllowedSources(mesh.MeshService{Namespace: "default", Name: "bookstore-v2"})
	if diff := cmp.Diff([]mesh.ServiceAccount{{Namespace: "default", Name: "bookbuyer"}}, gotSrc); diff != "" {
		t.Errorf("bookstore-v2 sources (-want +got):\n%s", diff)
	}
	in := snap.Inbound(bookstore)
	if len(in) != 1 || len(in[0].HTTP) != 2 || in[0].HTTP[0].PathRegex != "/books.*" || in[0].HTTP[0].Methods[0] != "GET" {
		t.Errorf("bookstore inbound = %+v, want one rule with GET /books.* and /buy-a-book/new", in)
	}
	seen := map[netip.Addr]bool{}
	for _, info := range snap.Services() {
		if !netip.MustParsePrefix(DefaultVIPRange).Contains(info.VIP) || seen[info.VIP] {
			t.Errorf("%s: VIP %v not unique in %s", info.Service, info.VIP, DefaultVIPRange)
		}
		seen[info.VIP] = true
	}

	var keys []Key
	for _, d := range docs {
		keys = append(keys, d.Key())
	}
	res, err = s.Delete(ctx, keys, false)
	if err != nil {
		t.Fatalf("Delete: %v", err)
	}
	if diff := cmp.Diff(allActions(docs, Deleted), actions(res)); diff != "" {
		t.Errorf("delete actions (-want +got):\n%s", diff)
	}
	if got := s.Snapshot().Objects(); len(got) != 0 {
		t.Errorf("objects after delete = %d, want 0", len(got))
	}
	if got := s.Snapshot().Services(); len(got) != 0 {
		t.Errorf("services after delete = %v, want none", got)
	}
}
