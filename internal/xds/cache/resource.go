package cache

import (
	"encoding/hex"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	discovery "github.com/envoyproxy/go-control-plane/envoy/service/discovery/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// Resource is an immutable, marshalled xDS resource. Create it with
// [Cache.NewResource]; share it by pointer. Its Any is shared by every
// response that carries it and must never be modified.
type Resource struct {
	name    string
	version string
	typeURL string
	msg     proto.Message // nil for an encoded Resource (see enc)
	enc     *encoding     // an encoded Resource's message and references (see Cache.NewEncodedResource)
	any     *anypb.Any
	delta   atomic.Pointer[discovery.Resource] // made for the first Delta response (see deltaResource)
	digest  uint64
	key     uint64       // a hash of type URL, name and version: the Interner's key
	holders atomic.Int32 // the Interner's count of its holders (see Interner.Hold)
}

// Name returns the resource name.
func (r *Resource) Name() string { return r.name }

// Version returns the resource's content-hash version.
func (r *Resource) Version() string { return r.version }

// TypeURL returns the resource's type URL.
func (r *Resource) TypeURL() string { return r.typeURL }

// Message returns the resource message. It must not be modified. An
// encoded Resource (see [Cache.NewEncodedResource]) decodes it at the
// first call; nil if its bytes do not decode (a bug of the producer).
func (r *Resource) Message() proto.Message {
	if r.enc == nil {
		return r.msg
	}
	r.enc.once.Do(func() {
		m := r.enc.typ.New().Interface()
		if err := proto.Unmarshal(r.Bytes(), m); err == nil {
			r.enc.msg = m
		}
	})
	return r.enc.msg
}

// Encoded reports whether the Resource was made from its bytes (see
// [Cache.NewEncodedResource]): its message was never built, and was not
// validated as one; its producer answers for it.
func (r *Resource) Encoded() bool { return r.enc != nil }

// References returns what an encoded Resource references, as its
// producer said (nil for one made from a message, whose message says).
func (r *Resource) References() []Reference {
	if r.enc == nil {
		return nil
	}
	return r.enc.refs
}

// Reference names a resource another references: a cluster its load
// assignment and secrets, a listener its route configuration.
type Reference struct{ TypeURL, Name string }

// encoding is what an encoded Resource has besides its bytes: its
// message, decoded when first asked for, and what it references.
type encoding struct {
	once sync.Once
	typ  protoreflect.MessageType
	msg  proto.Message
	refs []Reference
}

// Bytes returns the marshalled message, as sent. It must not be modified.
func (r *Resource) Bytes() []byte { return r.any.GetValue() }

// deltaResource returns r as a Delta response carries it, made at the
// first call (two callers at once get the same one).
func (r *Resource) deltaResource() *discovery.Resource {
	if d := r.delta.Load(); d != nil {
		return d
	}
	d := &discovery.Resource{Name: r.name, Version: r.version, Resource: r.any}
	if r.delta.CompareAndSwap(nil, d) {
		return d
	}
	return r.delta.Load()
}

// Set is an immutable set of resources of one type URL, keyed by name.
// It holds its resources sorted by name (no map: sets are many and small,
// one per group of proxies and type, and rebuilt at every change).
type Set struct {
	typeURL string
	sorted  []*Resource
	digest  uint64
	// anys are the resources' Anys for a wildcard response, made at the
	// first one (most sets, such as EDS's, are never sent whole); guarded
	// by the Cache's mutex.
	anys []*anypb.Any
	// version is Version's string, made at the first call: a group's set
	// is answered to every proxy of the group, whose node remembers the
	// version sent, so they share one string.
	version atomic.Pointer[string]
	// wildcard and first are the answers to streams that held nothing of
	// the type, for a wildcard subscription and by the names subscribed
	// to (see Cache.sotwAnswer); guarded by the Cache's mutex.
	wildcard *answer
	first    []*answer
}

// NewSet returns a Set of resources, which must share one type URL and have
// distinct names.
func NewSet(resources ...*Resource) (*Set, error) {
	if slices.Contains(resources, nil) {
		return nil, errNilResource
	}
	rs := slices.Clone(resources)
	if !slices.IsSortedFunc(rs, compareNames) { // callers mostly keep name order
		slices.SortFunc(rs, compareNames)
	}
	return NewSortedSet(rs)
}

// NewSortedSet is NewSet for resources already sorted by name (it checks),
// without copying: the Set keeps rs, which the caller must not modify
// afterwards.
func NewSortedSet(rs []*Resource) (*Set, error) {
	for i, r := range rs {
		if r == nil {
			return nil, errNilResource
		}
		if i == 0 {
			continue
		}
		switch c := compareNames(rs[i-1], r); {
		case c == 0:
			return nil, fmt.Errorf("cache: resource %q appears twice in a set; give each resource a distinct name", r.name)
		case c > 0:
			return nil, fmt.Errorf("cache: resources %q and %q are not in name order", rs[i-1].name, r.name)
		}
	}
	return newSet(rs)
}

func compareNames(a, b *Resource) int { return compareStrings(a.name, b.name) }

// newSet returns a Set of sorted, distinct resources (which it keeps).
func newSet(sorted []*Resource) (*Set, error) {
	s := &Set{sorted: sorted}
	for _, r := range sorted {
		if s.typeURL == "" {
			s.typeURL = r.typeURL
		} else if r.typeURL != s.typeURL {
			return nil, fmt.Errorf("cache: resource %q is a %s but the set holds %s", r.name, r.typeURL, s.typeURL)
		}
		s.digest += r.digest
	}
	return s, nil
}

func compareStrings(a, b string) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// With returns a copy of s in which resources replace those of the same name
// and are added otherwise. s is unchanged.
func (s *Set) With(resources ...*Resource) (*Set, error) {
	byName := make(map[string]*Resource, len(resources))
	for _, r := range resources {
		if r == nil {
			return nil, errNilResource
		}
		byName[r.name] = r
	}
	rs := make([]*Resource, 0, len(s.sorted)+len(byName))
	for _, r := range s.sorted {
		if n := byName[r.name]; n != nil {
			r = n
			delete(byName, r.name)
		}
		rs = append(rs, r)
	}
	if len(byName) > 0 {
		for _, r := range byName {
			rs = append(rs, r)
		}
		slices.SortFunc(rs, compareNames)
	}
	return newSet(rs)
}

// Update returns the Set of rs, which must name the resources of s in
// s's order: new versions of some of them, as when endpoints change. It
// keeps rs, which the caller must not modify afterwards. Cheaper than
// NewSortedSet: names are compared for equality, not order, and only the
// resources that changed are added into the digest again.
func (s *Set) Update(rs []*Resource) (*Set, error) {
	if len(rs) != len(s.sorted) {
		return nil, fmt.Errorf("cache: updating a set of %d resources with %d; build a new set with NewSet", len(s.sorted), len(rs))
	}
	out := &Set{typeURL: s.typeURL, sorted: rs, digest: s.digest}
	for i, r := range rs {
		have := s.sorted[i]
		switch {
		case r == have:
			continue
		case r == nil:
			return nil, errNilResource
		case r.name != have.name:
			return nil, fmt.Errorf("cache: updating resource %q with %q: an update keeps the names; build a new set with NewSet", have.name, r.name)
		case r.typeURL != s.typeURL:
			return nil, fmt.Errorf("cache: resource %q is a %s but the set holds %s", r.name, r.typeURL, s.typeURL)
		}
		out.digest += r.digest - have.digest
	}
	return out, nil
}

// Without returns a copy of s without the named resources.
func (s *Set) Without(names ...string) *Set {
	rs := make([]*Resource, 0, len(s.sorted))
	for _, r := range s.sorted {
		if !slices.Contains(names, r.name) {
			rs = append(rs, r)
		}
	}
	out, _ := newSet(rs) // cannot fail: a subset of a valid set
	return out
}

// Version returns the set's version, a digest of its names and versions.
func (s *Set) Version() string {
	if v := s.version.Load(); v != nil {
		return *v
	}
	v := digestString(s.digest)
	s.version.Store(&v)
	return v
}

// TypeURL returns the type URL of the set's resources ("" when empty).
func (s *Set) TypeURL() string { return s.typeURL }

// Len returns the number of resources.
func (s *Set) Len() int { return len(s.sorted) }

// Get returns the named resource, or nil.
func (s *Set) Get(name string) *Resource {
	i, ok := slices.BinarySearchFunc(s.sorted, name, func(r *Resource, name string) int { return compareStrings(r.name, name) })
	if !ok {
		return nil
	}
	return s.sorted[i]
}

// Resources returns the resources sorted by name. The slice must not be modified.
func (s *Set) Resources() []*Resource { return s.sorted }

func versionMap(rs []*Resource) map[string]string {
	m := make(map[string]string, len(rs))
	for _, r := range rs {
		m[r.name] = r.version
	}
	return m
}

func fnv(h uint64, b []byte) uint64 {
	for _, c := range b {
		h ^= uint64(c)
		h *= fnvPrime
	}
	return h
}

func fnvString(h uint64, s string) uint64 {
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= fnvPrime
	}
	return h
}

// entryDigest hashes one name/version pair; a set's digest is the sum of its
// entries' digests, so it does not depend on order.
func entryDigest(name, version string) uint64 {
	h := fnvString(fnvOffset, name)
	h = fnv(h, []byte{0})
	h = fnvString(h, version)
	// splitmix64 finalizer spreads the bits before summing.
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}

func digestString(d uint64) string {
	var b [8]byte
	for i := range b {
		b[i] = byte(d >> (56 - 8*i))
	}
	return hex.EncodeToString(b[:])
}
