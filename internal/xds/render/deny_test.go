package render

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/protobuf/proto"
)

func TestRefusalCode(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), nil)
	for _, tc := range []struct {
		name string
		want uint32
	}{
		{"bookstore.default.mesh:14001", CodePermissionDenied},
		{"bookwarehouse.default.mesh:14001", CodePermissionDenied},
		{"bookstore.default.mesh:14002", CodeNotFound}, // no such port
		{"bookstor.default.mesh:14001", CodeNotFound},  // typo
		{"bookstore.other.mesh:14001", CodeNotFound},
		{"bookstore.default.mesh", CodeNotFound},
		{"bookstore.default:14001", CodeNotFound},
		{"bookstore.default.x.mesh:14001", CodeNotFound},
		{"bookstore.default.mesh:port", CodeNotFound},
		{"", CodeNotFound},
	} {
		if got := RefusalCode(m, tc.name); got != tc.want {
			t.Errorf("RefusalCode(%q) = %d, want %d", tc.name, got, tc.want)
		}
	}
}

// TestRefusalGolden: the refusal listeners (one per code), their cluster
// and its empty load assignment pass the gRPC flavour's validation and
// match testdata/refusal-grpc.golden.
func TestRefusalGolden(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), nil)
	var r resources
	for _, name := range []string{"bookstore.default.mesh:14001", "bookstor.default.mesh:14001"} {
		l, err := RefusalListener(m, name)
		if err != nil {
			t.Fatal(err)
		}
		r.Listeners = append(r.Listeners, l)
	}
	r.Clusters = []proto.Message{RefusalCluster()}
	r.Endpoints = []proto.Message{RefusalLoadAssignment()}
	if err := Validate(GRPC, r.all()...); err != nil {
		t.Errorf("Validate: %v", err)
	}
	got := goldenJSON(t, r)
	path := filepath.Join("testdata", "refusal-grpc.golden")
	if *update {
		if err := os.WriteFile(path, got, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test -run TestRefusalGolden -update to create it)", err)
	}
	if !bytes.Equal(got, want) {
		t.Errorf("%s differs (-want +got; go test -run TestRefusalGolden -update if intended):\n%s", path, cmp.Diff(string(want), string(got)))
	}
	// Without the cluster, the listeners' route dangles.
	if err := Validate(GRPC, r.Listeners...); err == nil {
		t.Error("Validate passed refusal listeners without their cluster")
	}
}

// TestRefusalListenerShared: with a Memo, refusals with one code share
// their API listener body, so each costs only its name.
func TestRefusalListenerShared(t *testing.T) {
	m := meshOf(bookstoreSpec(t, false).Snapshot(), nil)
	m.Memo = NewMemo()
	a, err := RefusalListener(m, "bookstore.default.mesh:14001")
	if err != nil {
		t.Fatal(err)
	}
	b, err := RefusalListener(m, "bookwarehouse.default.mesh:14001")
	if err != nil {
		t.Fatal(err)
	}
	c, err := RefusalListener(m, "nothing:1")
	if err != nil {
		t.Fatal(err)
	}
	if a.ApiListener != b.ApiListener {
		t.Error("two PermissionDenied refusals do not share their API listener")
	}
	if a.ApiListener == c.ApiListener || proto.Equal(a.ApiListener, c.ApiListener) {
		t.Error("a PermissionDenied and a NotFound refusal have the same API listener")
	}
}
