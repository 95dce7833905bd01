package cache

import (
	"fmt"
	"sync"
	"testing"

	"google.golang.org/protobuf/proto"
)

// TestInternerConcurrentResource: callers asking at once for the
// Resources of the same messages get one Resource per message, each
// marshalled once, and equal content shares a Resource.
func TestInternerConcurrentResource(t *testing.T) {
	c := New(testLogger(t))
	in := NewInterner(c, nil)
	var msgs []proto.Message
	for i := range 50 {
		msgs = append(msgs, cluster(fmt.Sprintf("c%d", i)))
	}
	twin := cluster("c0") // another message, same content as msgs[0]
	before := c.Stats().Marshals
	const callers = 8
	got := make([][]*Resource, callers)
	var wg sync.WaitGroup
	for w := range callers {
		wg.Go(func() {
			for _, m := range msgs {
				r, err := in.Resource(m.(Named).GetName(), m)
				if err != nil {
					t.Error(err)
					return
				}
				got[w] = append(got[w], r)
			}
		})
	}
	wg.Wait()
	for w := 1; w < callers; w++ {
		for i := range msgs {
			if got[w][i] != got[0][i] {
				t.Fatalf("caller %d got another Resource for message %d", w, i)
			}
		}
	}
	if n := c.Stats().Marshals - before; n != uint64(len(msgs)) {
		t.Errorf("%d marshals for %d messages, want one each", n, len(msgs))
	}
	r, err := in.Resource("c0", twin)
	if err != nil {
		t.Fatal(err)
	}
	if r != got[0][0] {
		t.Error("a message of equal content got another Resource")
	}
	if in.Len() != len(msgs) {
		t.Errorf("Len() = %d, want %d", in.Len(), len(msgs))
	}
}
