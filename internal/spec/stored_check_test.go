package spec

import (
	"bytes"
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/internal/store"
	"github.com/osm-vm/osm-vm/internal/testlog"
)

// TestStoredDocumentsRevalidated: a document in the store that this
// version's validation refuses (stored by an older version, here written
// straight into the store) is logged at start, naming the document, the
// field and the fix, once, and still served as stored.
func TestStoredDocumentsRevalidated(t *testing.T) {
	st := store.NewMemory()
	s := newTestSpec(t, st)
	yaml := svcYAML("bookstore") + svcYAML("bookstore-v1") + strings.Replace(
		strings.Replace(splitYAML, "%s", "bookstore", 1), "%s", "bookstore-v1", 1)
	if _, err := s.Apply(t.Context(), mustParse(t, yaml), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	// An older version allowed any weight: rewrite the stored split so.
	kvs, err := st.List(t.Context(), "spec/v2/e/"+docItem(Key{Kind: KindTrafficSplit, Namespace: "default", Name: "split"}))
	if err != nil || len(kvs) != 1 {
		t.Fatalf("stored split: %v, %v", kvs, err)
	}
	bad := bytes.Replace(kvs[0].Value, []byte(`"weight":1`), []byte(`"weight":4294967296`), 1)
	if bytes.Equal(bad, kvs[0].Value) {
		t.Fatalf("stored split %s has no weight 1", kvs[0].Value)
	}
	if ok, err := st.Txn(t.Context(), store.Set(kvs[0].Key, store.AnyVersion, bad)); !ok || err != nil {
		t.Fatal(ok, err)
	}

	var logs testlog.Buffer
	r, err := New(t.Context(), logs.Logger(), st)
	if err != nil {
		t.Fatalf("a stored document that no longer validates stopped the start: %v", err)
	}
	for _, want := range []string{"level=ERROR", "TrafficSplit default/split", "spec.backends[0].weight", "out of range", "apply a corrected version"} {
		if !strings.Contains(logs.String(), want) {
			t.Errorf("start log lacks %q:\n%s", want, logs.String())
		}
	}
	if got := len(r.Snapshot().Objects()); got != 3 {
		t.Errorf("%d documents served, want the 3 stored", got)
	}
	// Another replica's change re-reads the store: the same problem is
	// not logged again.
	before := strings.Count(logs.String(), "does not pass")
	if _, err := s.Apply(t.Context(), mustParse(t, svcYAML("other")), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := r.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(logs.String(), "does not pass"); n != before {
		t.Errorf("the same problem logged again after a refresh (%d -> %d):\n%s", before, n, logs.String())
	}
	if got := len(r.Snapshot().Objects()); got != 4 {
		t.Errorf("%d documents served after the refresh, want 4", got)
	}
}

// TestStoredValidSpecificationLogsNothing: the examples' specifications
// read back from the store raise no problem.
func TestStoredValidSpecificationLogsNothing(t *testing.T) {
	st := store.NewMemory()
	s := newTestSpec(t, st)
	if _, err := s.Apply(t.Context(), bookstoreDocs(t), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	var logs testlog.Buffer
	if _, err := New(t.Context(), logs.Logger(), st); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(logs.String(), "does not pass") {
		t.Errorf("a valid stored specification logged problems:\n%s", logs.String())
	}
}
