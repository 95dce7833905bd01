package cache

import (
	"fmt"
	"sync"
	"testing"

	clusterv3 "github.com/envoyproxy/go-control-plane/envoy/config/cluster/v3"
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

// TestEncodedResource: a Resource made from bytes is the Resource of the
// message they encode (same bytes, version and type URL, interned as
// one), decodes its message only when asked, once, and is never passed
// to the forget function (no validator saw a message of it).
func TestEncodedResource(t *testing.T) {
	c := New(testLogger(t))
	var forgot []proto.Message
	in := NewInterner(c, func(ms ...proto.Message) { forgot = append(forgot, ms...) })
	msg := cluster("c0")
	fromMsg, err := c.NewResource("c0", msg)
	if err != nil {
		t.Fatal(err)
	}
	before := c.Stats().Marshals
	enc, err := c.NewEncodedResource("c0", (*clusterv3.Cluster)(nil), fromMsg.Bytes())
	if err != nil {
		t.Fatal(err)
	}
	if n := c.Stats().Marshals - before; n != 1 {
		t.Errorf("encoding counted %d resources made, want 1", n)
	}
	if enc.Version() != fromMsg.Version() || enc.TypeURL() != fromMsg.TypeURL() || enc.Name() != "c0" {
		t.Errorf("encoded: %s %s %s; from the message: %s %s %s", enc.Name(), enc.TypeURL(), enc.Version(), fromMsg.Name(), fromMsg.TypeURL(), fromMsg.Version())
	}
	if !enc.Encoded() || fromMsg.Encoded() {
		t.Errorf("Encoded() = %v for the encoded, %v for the marshalled one", enc.Encoded(), fromMsg.Encoded())
	}
	if enc.enc.msg != nil {
		t.Error("the message was decoded before anyone asked for it")
	}
	m := enc.Message()
	if !proto.Equal(m, msg) || m == proto.Message(msg) {
		t.Errorf("Message() = %v, want a decoded copy of %v", m, msg)
	}
	if enc.Message() != m {
		t.Error("Message() decoded again")
	}
	if in.Intern(fromMsg) != fromMsg || in.Intern(enc) != fromMsg {
		t.Error("equal content is not one interned Resource")
	}
	in.retain(enc)
	in.release(enc)
	in.Forget(enc)
	if len(forgot) != 0 {
		t.Errorf("forget was told of %d messages of an encoded Resource", len(forgot))
	}
	if _, err := c.NewEncodedResource("", (*clusterv3.Cluster)(nil), nil); err == nil {
		t.Error("an encoded Resource without a name: no error")
	}
	bad, err := c.NewEncodedResource("bad", (*clusterv3.Cluster)(nil), []byte{0xff})
	if err != nil {
		t.Fatal(err)
	}
	if bad.Message() != nil {
		t.Error("bytes that do not decode gave a message")
	}
}

// TestInternerEncodedResource: the same bytes (one slice) handed out
// again give the same Resource, their references asked for once; equal
// bytes in another slice are interned as one content.
func TestInternerEncodedResource(t *testing.T) {
	c := New(testLogger(t))
	in := NewInterner(c, nil)
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(cluster("c0"))
	if err != nil {
		t.Fatal(err)
	}
	asked := 0
	refs := func() []Reference {
		asked++
		return []Reference{{TypeURL: "type.googleapis.com/envoy.config.endpoint.v3.ClusterLoadAssignment", Name: "c0"}}
	}
	first, err := in.EncodedResource("c0", (*clusterv3.Cluster)(nil), b, refs)
	if err != nil {
		t.Fatal(err)
	}
	again, err := in.EncodedResource("c0", (*clusterv3.Cluster)(nil), b, refs)
	if err != nil {
		t.Fatal(err)
	}
	if again != first || asked != 1 {
		t.Errorf("the same bytes again: same Resource %v, references asked %d times", again == first, asked)
	}
	if got := first.References(); len(got) != 1 || got[0].Name != "c0" {
		t.Errorf("References() = %v", got)
	}
	copied, err := in.EncodedResource("c0", (*clusterv3.Cluster)(nil), append([]byte(nil), b...), refs)
	if err != nil {
		t.Fatal(err)
	}
	if copied != first {
		t.Error("equal bytes in another slice are another interned Resource")
	}
	in.ForgetMessages()
	if _, err := in.EncodedResource("c0", (*clusterv3.Cluster)(nil), b, refs); err != nil || asked != 3 {
		t.Errorf("after ForgetMessages: err %v, references asked %d times, want 3", err, asked)
	}
}

// TestInternerKeyCollision: two contents whose keys collide are both
// served; the second is not interned, and releasing it leaves the first.
func TestInternerKeyCollision(t *testing.T) {
	c := New(testLogger(t))
	in := NewInterner(c, nil)
	a, err := c.NewResource("a", cluster("a"))
	if err != nil {
		t.Fatal(err)
	}
	b, err := c.NewResource("b", cluster("b"))
	if err != nil {
		t.Fatal(err)
	}
	b.key = a.key
	if in.Intern(a) != a || in.Intern(b) != b {
		t.Fatal("a colliding content was given another's Resource")
	}
	in.retain(b)
	in.release(b)
	if in.Len() != 1 || in.Intern(a) != a {
		t.Error("releasing the colliding Resource let go of the first")
	}
	twin, err := c.NewResource("a", cluster("a"))
	if err != nil {
		t.Fatal(err)
	}
	if in.Intern(twin) != a {
		t.Error("equal content is not one Resource")
	}
}

// TestInternerConcurrentRelease: Releases running in parallel (as a full
// generation's are) count every holder once: the Resources held twice
// stay interned, the others are forgotten, and the forget function is
// told of each of those once.
func TestInternerConcurrentRelease(t *testing.T) {
	c := New(testLogger(t))
	var mu sync.Mutex
	forgotten := map[proto.Message]int{}
	in := NewInterner(c, func(ms ...proto.Message) {
		mu.Lock()
		defer mu.Unlock()
		for _, m := range ms {
			forgotten[m]++
		}
	})
	var rs []*Resource
	for i := range 2000 {
		r, err := in.Resource(fmt.Sprint("c", i), cluster(fmt.Sprint("c", i)))
		if err != nil {
			t.Fatal(err)
		}
		in.retain(r)
		if i%2 == 0 {
			in.retain(r) // held twice: one Release leaves it interned
		}
		rs = append(rs, r)
	}
	const releasers = 8
	var wg sync.WaitGroup
	for w := range releasers {
		wg.Go(func() {
			for i := w; i < len(rs); i += releasers {
				in.release(rs[i])
			}
		})
	}
	wg.Wait()
	if in.Len() != 1000 || in.Held() != 1000 {
		t.Fatalf("after releasing each Resource once: %d interned, %d held; want the 1,000 retained twice", in.Len(), in.Held())
	}
	for i, r := range rs {
		if n, want := forgotten[r.Message()], i%2; n != want {
			t.Fatalf("resource %d: the forget function was told of it %d times, want %d", i, n, want)
		}
	}
}
