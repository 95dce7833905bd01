package spec

import (
	"errors"
	"fmt"
	"runtime"
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/internal/store"
)

// TestStoredSpecificationIsBounded: an apply (or its dry run) that would
// store more than the limit is refused and stores nothing; a change that
// shrinks the specification is allowed even above the limit.
func TestStoredSpecificationIsBounded(t *testing.T) {
	s := newTestSpec(t, store.NewMemory())
	services := func(from, to int) []Document {
		var b strings.Builder
		for i := from; i < to; i++ {
			fmt.Fprintf(&b, "---\napiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: s%d}\nspec: {ports: [{port: 80}]}\n", i)
		}
		docs, err := Parse([]byte(b.String()), "s.yaml")
		if err != nil {
			t.Fatal(err)
		}
		return docs
	}
	if _, err := s.Apply(t.Context(), services(0, 20), ApplyOptions{}); err != nil {
		t.Fatal(err)
	}
	stored, _, err := s.load(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	s.maxStored = stored.size + 100 // room for less than one more Service
	for _, opts := range []ApplyOptions{{DryRun: true}, {}} {
		_, err := s.Apply(t.Context(), services(20, 22), opts)
		var ve *ValidationError
		if !errors.As(err, &ve) || len(ve.Errors) != 1 || !strings.Contains(ve.Errors[0].Message, fmt.Sprintf("over the limit of %d bytes (now %d bytes)", s.maxStored, stored.size)) {
			t.Fatalf("Apply(%+v) over the limit: %v, want one error naming the limit", opts, err)
		}
	}
	if got, want := len(s.Snapshot().Objects()), 20; got != want {
		t.Errorf("%d documents after refused applies, want %d", got, want)
	}
	s.maxStored = 10 // far below what is stored
	if _, err := s.Delete(t.Context(), []Key{{Kind: KindService, Namespace: "default", Name: "s0"}}, false); err != nil {
		t.Errorf("Delete above the limit: %v, want it allowed (it shrinks the specification)", err)
	}
}

// TestParseBoundsNodes: YAML without aliases still costs hundreds of bytes
// of parser memory per node, so a request under the body limit that is all
// tiny nodes ("[1,1,1,...]") is refused before it is parsed, naming the
// file and the limit, and parsing it allocates little.
func TestParseBoundsNodes(t *testing.T) {
	flood := "[" + strings.Repeat("1,", (MaxRequestBytes-16)/2) + "1]\n"
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	_, err := Parse([]byte(flood), "flood.yaml")
	runtime.ReadMemStats(&after)
	allocated := after.TotalAlloc - before.TotalAlloc
	if err == nil || !strings.Contains(err.Error(), "flood.yaml") || !strings.Contains(err.Error(), "YAML nodes") {
		t.Errorf("Parse(%d bytes of [1,1,...]) = %v; want an error naming flood.yaml and the node limit", len(flood), err)
	}
	if allocated > 64<<20 {
		t.Errorf("parsing %d bytes of [1,1,...] allocated %d MiB; want it refused before it is parsed", len(flood), allocated>>20)
	}
	t.Logf("%d bytes of [1,1,...]: %d MiB allocated", len(flood), allocated>>20)
}
