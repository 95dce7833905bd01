package cache

import (
	"fmt"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/proto"

	"github.com/osm-vm/osm-vm/internal/xds/shard"
)

// Interner holds one Resource per content (type URL, name and version), so
// that producers that build equal resources for many proxies share one
// Resource (and one marshal), and whatever remembers something per message
// (a validator) sees each content once. A Resource stays interned while
// something holds it: Hold and its Release count the holders, and at 0 it is
// forgotten, and the forget function given to NewInterner is told (once
// per Release, of every message it forgot).
//
// It also remembers the Resource of each message it marshalled
// ([Interner.Resource]), until ForgetMessages: a producer that hands out
// the same message to many proxies (render's Memo) marshals it once.
//
// Safe for concurrent use, so that a producer can render in parallel:
// two callers asking for the Resource of one message at once get one
// Resource from one marshal. Parallel renderers intern, find what was
// made and count holders in shard.Maps (looked up without a lock) and
// atomic counts, not under one lock (see once, retain and release): the
// Interner's lock (mu) serializes the calls of the forget function only,
// which must not call the Interner.
//
// A Resource is counted by one Interner: the counts live in the Resource.
type Interner struct {
	c         *Cache
	forget    func(...proto.Message)
	mu        sync.Mutex                    // held while the forget function is called
	byContent *shard.Map[uint64, *Resource] // by Resource.key; see Intern
	// made holds the *marshalling of each message, and of each encoded
	// resource's bytes by their first byte, until ForgetMessages (see
	// once).
	made *shard.Map[any, *marshalling]
	held atomic.Int64 // Resources with at least one holder (see retain)
}

// marshalling is the Resource of a message: mu is held by the caller
// making it until r (or err) is set, and done is set just before.
type marshalling struct {
	done atomic.Bool
	mu   sync.Mutex
	r    *Resource
	err  error
}

// result returns what m was made into, waiting while it is being made.
func (m *marshalling) result() (*Resource, error) {
	if !m.done.Load() {
		m.mu.Lock() // waits while another caller makes it
		defer m.mu.Unlock()
	}
	return m.r, m.err
}

// NewInterner returns an Interner making resources with c; forget (may be
// nil) is told of the messages whose Resources are no longer interned.
func NewInterner(c *Cache, forget func(...proto.Message)) *Interner {
	return &Interner{
		c: c, forget: forget,
		byContent: shard.New[uint64, *Resource](),
		made:      shard.NewGenerational[any, *marshalling](),
	}
}

// Intern returns the Resource already held for r's content, or r, which
// is interned from now on.
func (in *Interner) Intern(r *Resource) *Resource {
	old := in.byContent.Keep(r.key, r)
	if old != r && old.typeURL == r.typeURL && old.name == r.name && old.version == r.version {
		return old
	}
	// Another content with the same key (a 64-bit hash: never seen) is
	// not interned; only sharing is lost.
	return r
}

// Resource returns the interned Resource of msg named name, marshalling
// only a message it has not seen since ForgetMessages.
func (in *Interner) Resource(name string, msg proto.Message) (*Resource, error) {
	return in.once(msg, func() (*Resource, error) { return in.c.NewResource(name, msg) })
}

// EncodedResource returns the interned Resource of b, a message of typ's
// type encoded by its producer (see [Cache.NewEncodedResource]), which
// references refs() (asked only when the Resource is made); a producer
// that hands the same bytes (the same slice) to many callers gets one
// Resource for them until ForgetMessages.
func (in *Interner) EncodedResource(name string, typ proto.Message, b []byte, refs func() []Reference) (*Resource, error) {
	build := func() (*Resource, error) { return in.c.NewEncodedResource(name, typ, b, refs()...) }
	if len(b) == 0 {
		r, err := build()
		if err != nil {
			return nil, err
		}
		return in.Intern(r), nil
	}
	r, err := in.once(&b[0], build)
	if err == nil && r.name != name {
		return nil, fmt.Errorf("cache: the bytes of resource %q were handed out as %q: an encoder reused its buffer", r.name, name)
	}
	return r, err
}

// once returns the interned Resource made from what key (a message, or
// the first byte of encoded bytes) points to: made by build the first time
// since ForgetMessages, while other callers asking for it wait.
func (in *Interner) once(key any, build func() (*Resource, error)) (*Resource, error) {
	if m, ok := in.made.Get(key); ok {
		return m.result()
	}
	m := &marshalling{}
	m.mu.Lock()
	if have := in.made.Keep(key, m); have != m {
		return have.result()
	}
	r, err := build()
	if err != nil {
		in.made.Take(key) // asked again, made again
		m.err = err
	} else {
		m.r = in.Intern(r)
	}
	m.done.Store(true)
	m.mu.Unlock()
	return m.r, m.err
}

// Named is a message with a name: every xDS resource.
type Named interface {
	proto.Message
	GetName() string
}

// Resources returns the interned Resource of each message (see
// [Interner.Resource]).
func Resources[T Named](in *Interner, msgs []T) ([]*Resource, error) {
	rs := make([]*Resource, 0, len(msgs))
	for _, m := range msgs {
		r, err := in.Resource(m.GetName(), m)
		if err != nil {
			return nil, err
		}
		rs = append(rs, r)
	}
	return rs, nil
}

// InternedSet returns a Set of the messages' interned Resources.
func InternedSet[T Named](in *Interner, msgs []T) (*Set, error) {
	rs, err := Resources(in, msgs)
	if err != nil {
		return nil, err
	}
	return NewSet(rs...)
}

// ForgetMessages forgets which message (or encoded bytes) each Resource
// was made from (when those handed out before will not be seen again);
// the Resources stay interned.
func (in *Interner) ForgetMessages() {
	in.made.Clear()
}

// Hold is a holding of interned Resources: Interner.Hold counts one more
// holder of each, and Release counts one less, once (a second Release,
// and the zero Hold's, do nothing), forgetting those no longer held. A
// holder keeps its Holds and releases them; it never counts by hand. A
// Hold is a value: holding allocates nothing (it keeps the caller's
// slice, which must not change while held).
type Hold struct {
	in *Interner
	rs []*Resource
}

// Hold counts one more holder of each Resource, until the Hold's Release.
// It may run in parallel with other Holds, not with a Release of the same
// Resources.
func (in *Interner) Hold(rs ...*Resource) Hold {
	in.retain(rs...)
	return Hold{in: in, rs: rs}
}

// Release counts one holder less of each held Resource (see
// release) and empties h. Releases may run in parallel with one
// another.
func (h *Hold) Release() {
	if h.in != nil {
		h.in.release(h.rs...)
	}
	*h = Hold{}
}

// Resources returns the held Resources.
func (h Hold) Resources() []*Resource { return h.rs }

// retain counts one more holder of each Resource. It may run in parallel
// with other retains, not with a Release of the same Resources.
func (in *Interner) retain(rs ...*Resource) {
	for _, r := range rs {
		if r.holders.Add(1) == 1 {
			in.held.Add(1)
		}
	}
}

// release counts one holder less of each Resource, forgetting those no
// longer held (and those never retained). Releases may run in parallel
// with one another (a full generation releases every group's previous
// resources on every core), not with a retain of the same Resources.
func (in *Interner) release(rs ...*Resource) {
	var gone []proto.Message
	for _, r := range rs {
		if n := r.holders.Add(-1); n <= 0 {
			if n == 0 {
				in.held.Add(-1)
			} else {
				r.holders.Store(0)
			}
			in.unintern(r)
			if r.msg != nil { // an encoded Resource's was never validated
				gone = append(gone, r.msg)
			}
		}
	}
	in.tell(gone...)
}

// Forget uninterns r (which nothing holds any more, or which is held
// outside the counts, as a producer's only copy) and tells the forget
// function.
func (in *Interner) Forget(r *Resource) {
	in.unintern(r)
	if r.msg != nil { // an encoded Resource's was never validated
		in.tell(r.msg)
	}
}

// tell calls the forget function with gone (if any), one call at a time.
func (in *Interner) tell(gone ...proto.Message) {
	if in.forget == nil || len(gone) == 0 {
		return
	}
	in.mu.Lock()
	defer in.mu.Unlock()
	in.forget(gone...)
}

// unintern forgets r's content, if r is what is interned for it.
func (in *Interner) unintern(r *Resource) {
	in.byContent.DeleteIf(r.key, func(have *Resource) bool { return have == r })
}

// Reset forgets every interned Resource without telling the forget
// function (benchmarks start cold with it).
func (in *Interner) Reset() {
	in.byContent.Clear()
	in.made.Clear()
}

// Len returns the number of interned Resources.
func (in *Interner) Len() int {
	return in.byContent.Len()
}

// Held returns the number of Resources with at least one holder.
func (in *Interner) Held() int {
	return int(in.held.Load())
}
