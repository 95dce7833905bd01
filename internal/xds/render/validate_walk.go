package render

// How validation walks a resource: into the fields that can reach a
// check or an Any, unpacking each Any, and remembering per-proxy
// listeners' shared filter chains (the typed walks are in walk.go).

import (
	"slices"

	listenerv3 "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
)

// walk visits m and every message below it that a check applies to,
// unpacking Anys. It descends only into fields through which such a
// message can be reached (see [Validator.fieldsOf]); ValidateAll has
// already checked the rest. Types render produces have a typed walk (see
// typedWalks); others are walked reflectively.
func (v *validation) walk(m protoreflect.Message) {
	if m.IsValid() {
		v.walkMsg(m.Interface())
	}
}

// unpack returns the message in a: the one it was packed from, if a is
// one of render's shared constants or the Memo knows it (then forgetting it: what the walk finds is remembered),
// or else a new one unmarshalled from it.
func (v *validation) unpack(a *anypb.Any) (proto.Message, error) {
	if m, ok := constants[a]; ok {
		return m, nil
	}
	if v.memo != nil {
		if m, ok := v.memo.takePacked(a); ok {
			return m, nil
		}
	}
	return a.UnmarshalNew()
}

// walkChain walks a per-proxy listener's filter chain once per Validator:
// what it finds is remembered without the listener's label and given the
// label of each listener that holds the chain.
func (v *validation) walkChain(fc *listenerv3.FilterChain) {
	v.vr.mu.Lock()
	w, ok := v.vr.chains[fc]
	v.vr.mu.Unlock()
	if !ok {
		refs, errs := len(v.refs), len(v.errs)
		v.wFilterChain(fc)
		w = walked{refs: slices.Clone(v.refs[refs:]), errs: slices.Clone(v.errs[errs:])}
		for i := range w.refs {
			w.refs[i].from = nil
		}
		for i := range w.errs {
			w.errs[i].in = nil
		}
		v.refs, v.errs = v.refs[:refs], v.errs[:errs]
		v.vr.mu.Lock()
		v.vr.chains[fc] = w
		v.vr.mu.Unlock()
	}
	for _, r := range w.refs {
		r.from = v.in
		v.refs = append(v.refs, r)
	}
	for _, f := range w.errs {
		f.in = v.in
		v.errs = append(v.errs, f)
	}
}

// walkFields checks m and walks on below it, reflectively.
func (v *validation) walkFields(m protoreflect.Message) {
	if !m.IsValid() {
		return
	}
	md := m.Descriptor()
	if check := checks[md.FullName()]; check != nil {
		check(v, m.Interface())
	}
	v.walkFieldsOf(m, v.vr.fieldsOf(md))
}

// walkFieldsOf walks the messages in fields fds of m.
func (v *validation) walkFieldsOf(m protoreflect.Message, fds []protoreflect.FieldDescriptor) {
	for _, fd := range fds {
		switch {
		case fd.IsList():
			for i, l := 0, m.Get(fd).List(); i < l.Len(); i++ {
				v.walk(l.Get(i).Message())
			}
		case fd.IsMap():
			m.Get(fd).Map().Range(func(_ protoreflect.MapKey, mv protoreflect.Value) bool {
				v.walk(mv.Message())
				return true
			})
		case m.Has(fd):
			v.walk(m.Get(fd).Message())
		}
	}
}

// fieldsOf returns md's message, list-of-message and map-of-message fields
// through which walk can reach an Any or a message that has a check. It is
// worked out once per message type: for every type reachable from md, a
// type is of interest if it has a check, is an Any, or has a field of a
// type of interest (to a fixed point, as types recurse).
func (vr *Validator) fieldsOf(md protoreflect.MessageDescriptor) []protoreflect.FieldDescriptor {
	vr.fieldsMu.RLock()
	fs, ok := vr.fields[md.FullName()]
	vr.fieldsMu.RUnlock()
	if ok {
		return fs
	}
	vr.fieldsMu.Lock()
	defer vr.fieldsMu.Unlock()
	if fs, ok := vr.fields[md.FullName()]; ok {
		return fs
	}
	reach := map[protoreflect.FullName]protoreflect.MessageDescriptor{}
	var collect func(protoreflect.MessageDescriptor)
	collect = func(d protoreflect.MessageDescriptor) {
		if _, ok := reach[d.FullName()]; ok {
			return
		}
		reach[d.FullName()] = d
		for i, fs := 0, d.Fields(); i < fs.Len(); i++ {
			if t := messageOf(fs.Get(i)); t != nil {
				collect(t)
			}
		}
	}
	collect(md)
	of := map[protoreflect.FullName]bool{}
	for name := range reach {
		of[name] = checks[name] != nil || name == anyName
	}
	for changed := true; changed; {
		changed = false
		for name, d := range reach {
			for i, fs := 0, d.Fields(); !of[name] && i < fs.Len(); i++ {
				if t := messageOf(fs.Get(i)); t != nil && of[t.FullName()] {
					of[name], changed = true, true
				}
			}
		}
	}
	for name, d := range reach {
		if _, ok := vr.fields[name]; ok {
			continue
		}
		var walk []protoreflect.FieldDescriptor
		for i, fs := 0, d.Fields(); i < fs.Len(); i++ {
			if t := messageOf(fs.Get(i)); t != nil && of[t.FullName()] {
				walk = append(walk, fs.Get(i))
			}
		}
		vr.fields[name] = walk
	}
	return vr.fields[md.FullName()]
}

var anyName = nameOf(&anypb.Any{})

// messageOf returns the message type a field holds (a map's value type for
// a map), or nil.
func messageOf(fd protoreflect.FieldDescriptor) protoreflect.MessageDescriptor {
	if fd.IsMap() {
		return fd.MapValue().Message()
	}
	return fd.Message()
}
