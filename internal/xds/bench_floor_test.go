package xds

import (
	"errors"
	"testing"

	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// BenchmarkFullGenerationFloor: what protobuf-go and protoc-gen-validate
// alone cost for W's configuration, the part of M4's full generation a
// renderer that builds every resource as messages pays: every distinct
// message of a full generation's 7,997 resources and the messages packed
// into their Anys (decoded from one generation's bytes, since most are
// written as bytes: see render's stamps), marshalled deterministically
// and validated (ValidateAll) on the publisher's workers
// (Publisher.parallel, as it renders groups). The publisher, which
// builds only the templates and what varies in length, can take less.
func BenchmarkFullGenerationFloor(b *testing.B) {
	p, _, c := benchPublisher(b, 1000, 10)
	resources, ms := renderedMessages(p, c)
	if want := int(c.Stats().Marshals); resources != want {
		b.Fatalf("collected %d resources; a full generation marshals %d", resources, want)
	}
	type validator interface{ ValidateAll() error }
	for _, bc := range []struct {
		name string
		f    func(proto.Message) error
	}{
		{"marshal", func(m proto.Message) error {
			_, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
			return err
		}},
		{"validate", func(m proto.Message) error { return m.(validator).ValidateAll() }},
		{"marshal+validate", func(m proto.Message) error {
			if _, err := (proto.MarshalOptions{Deterministic: true}).Marshal(m); err != nil {
				return err
			}
			return m.(validator).ValidateAll()
		}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			errs := make([]error, len(ms))
			cpu := startCPU()
			for b.Loop() {
				p.parallel(len(ms), func(i int) { errs[i] = bc.f(ms[i]) })
				if err := errors.Join(errs...); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(len(ms)), "messages/op")
			cpu.report(b)
		})
	}
}

// renderedMessages returns the number of distinct resources the proxies
// of p have in c, and those resources with every message packed into an
// Any inside them (unpacked; distinct by pointer, as the publisher
// marshals each shared message once).
func renderedMessages(p *Publisher, c *cache.Cache) (int, []proto.Message) {
	seen := map[proto.Message]bool{}
	var out []proto.Message
	var add func(proto.Message)
	var walk func(protoreflect.Message)
	visit := func(m protoreflect.Message) {
		if a, ok := m.Interface().(*anypb.Any); ok {
			if in, err := a.UnmarshalNew(); err == nil {
				add(in)
			}
			return
		}
		walk(m)
	}
	walk = func(m protoreflect.Message) {
		m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
			switch {
			case fd.IsList() && fd.Message() != nil:
				for i := range v.List().Len() {
					visit(v.List().Get(i).Message())
				}
			case fd.IsMap() && fd.MapValue().Message() != nil:
				v.Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
					visit(mv.Message())
					return true
				})
			case !fd.IsList() && !fd.IsMap() && fd.Message() != nil:
				visit(v.Message())
			}
			return true
		})
	}
	add = func(m proto.Message) {
		if !seen[m] {
			seen[m] = true
			out = append(out, m)
			walk(m.ProtoReflect())
		}
	}
	resources := map[proto.Message]bool{}
	for _, g := range p.groups {
		for id := range g.nodes {
			for _, s := range c.View(id) {
				for _, r := range s.Resources() {
					resources[r.Message()] = true
					add(r.Message())
				}
			}
		}
	}
	return len(resources), out
}
