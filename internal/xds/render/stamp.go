package render

import (
	"bytes"
	"errors"
	"fmt"
	"slices"
	"strings"
	"unicode/utf8"

	"github.com/envoyproxy/protoc-gen-validate/validate"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/reflect/protoregistry"
)

// A stamp is the wire encoding of a message rendered with placeholders in
// place of some names (see newStamp), from which the encoding of the
// message rendered with other names is written (fill) without building
// it: its bytes are copied, the strings that held placeholders are
// written with the names, and the length of every message around them
// is encoded again. Rendering a shape many times (an EDS cluster per
// upstream) so costs one build, marshal and validation per shape, and a
// copy per instance.
//
// Only strings may vary: a builder whose output has another structure
// (more list entries, other numbers, a field left out) for other names
// is not a shape; which inputs make a shape is the caller's key, and
// tests compare every stamped resource with the built one.
type stamp struct {
	parts []stampPart
}

// stampPart is bytes copied as they are, a string field whose value
// holds placeholders (hole), or a message field with holes inside
// (nested). For the last two, lit is the field's tag.
type stampPart struct {
	lit    []byte
	hole   []stampSeg
	nested *stamp
	splice int                          // a message field written from the instance's splices[splice-1] (0: none)
	field  protoreflect.FieldDescriptor // of a hole, for its rules and errors
	rules  *validate.StringRules        // a hole's rules (nil: none)
}

// stampSeg is text of a hole's template value, or placeholder ph (when
// ph >= 0).
type stampSeg struct {
	text string
	ph   int
}

// newStamp returns the stamp of b, the deterministic encoding of a
// message of type md rendered with placeholders phs (distinct strings
// that appear nowhere else in it) and, for message fields an instance
// gives whole (already encoded), splices: the encodings of the messages
// the template held there, each unique in it. It fails if a placeholder
// is in a field that is not a string, or in a string whose validation
// rules it cannot check for other values (see checkable).
func newStamp(b []byte, md protoreflect.MessageDescriptor, phs []string, splices [][]byte) (*stamp, error) {
	s := &stamp{}
	var anyValue protoreflect.MessageDescriptor // an Any's type, from its type URL (written first)
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return nil, fmt.Errorf("stamp %s: %w", md.FullName(), protowire.ParseError(n))
		}
		m := protowire.ConsumeFieldValue(num, typ, b[n:])
		if m < 0 {
			return nil, fmt.Errorf("stamp %s: %w", md.FullName(), protowire.ParseError(m))
		}
		field, tag := b[:n+m], b[:n]
		b = b[n+m:]
		if typ != protowire.BytesType {
			s.literal(field)
			continue
		}
		v, _ := protowire.ConsumeBytes(field[n:])
		isAny := md.FullName() == anyName
		if isAny && num == 1 {
			if mt, err := protoregistry.GlobalTypes.FindMessageByURL(string(v)); err == nil {
				anyValue = mt.Descriptor()
			}
		}
		fd := md.Fields().ByNumber(num)
		if k := slices.IndexFunc(splices, func(sp []byte) bool { return bytes.Equal(sp, v) }); k >= 0 && fd != nil && fd.Kind() == protoreflect.MessageKind {
			s.parts = append(s.parts, stampPart{lit: tag, splice: k + 1})
			continue
		}
		if !holdsPlaceholder(string(v), phs) && !slices.ContainsFunc(splices, func(sp []byte) bool { return bytes.Contains(v, sp) }) {
			s.literal(field)
			continue
		}
		switch {
		case isAny && num == 2:
			if anyValue == nil {
				return nil, fmt.Errorf("stamp %s: a placeholder in an Any of an unknown type", md.FullName())
			}
			inner, err := newStamp(v, anyValue, phs, splices)
			if err != nil {
				return nil, err
			}
			s.parts = append(s.parts, stampPart{lit: tag, nested: inner})
		case fd == nil:
			return nil, fmt.Errorf("stamp %s: a placeholder in unknown field %d", md.FullName(), num)
		case fd.Kind() == protoreflect.StringKind:
			rules, err := checkable(fd)
			if err != nil {
				return nil, err
			}
			s.parts = append(s.parts, stampPart{lit: tag, hole: segments(string(v), phs), field: fd, rules: rules})
		case fd.Kind() == protoreflect.MessageKind:
			inner, err := newStamp(v, fd.Message(), phs, splices)
			if err != nil {
				return nil, err
			}
			s.parts = append(s.parts, stampPart{lit: tag, nested: inner})
		default:
			return nil, fmt.Errorf("stamp %s: a placeholder in %s, a %s field: only strings may vary", md.FullName(), fd.FullName(), fd.Kind())
		}
	}
	return s, nil
}

// literal appends bytes copied as they are, to the last part if it is
// such bytes too.
func (s *stamp) literal(b []byte) {
	if k := len(s.parts) - 1; k >= 0 && s.parts[k].hole == nil && s.parts[k].nested == nil && s.parts[k].splice == 0 {
		s.parts[k].lit = append(s.parts[k].lit, b...)
		return
	}
	s.parts = append(s.parts, stampPart{lit: append([]byte(nil), b...)})
}

func holdsPlaceholder(v string, phs []string) bool {
	for _, ph := range phs {
		if strings.Contains(v, ph) {
			return true
		}
	}
	return false
}

// segments splits v at the placeholders it holds.
func segments(v string, phs []string) []stampSeg {
	var out []stampSeg
	for v != "" {
		at, ph := len(v), -1
		for i, p := range phs {
			if j := strings.Index(v, p); j >= 0 && j < at {
				at, ph = j, i
			}
		}
		if at > 0 {
			out = append(out, stampSeg{text: v[:at], ph: -1})
		}
		if ph < 0 {
			break
		}
		out = append(out, stampSeg{ph: ph})
		v = v[at+len(phs[ph]):]
	}
	return out
}

// checkable returns the validation rules of string field fd if every one
// of them can be checked on a stamped value (see checkValue): lengths,
// prefix, suffix and contents. A field with another rule (a pattern, a
// set of values, a well-known format) cannot be a hole.
func checkable(fd protoreflect.FieldDescriptor) (*validate.StringRules, error) {
	fr, _ := proto.GetExtension(fd.Options(), validate.E_Rules).(*validate.FieldRules)
	if fr == nil {
		return nil, nil
	}
	r := fr.GetString_()
	if fd.IsList() {
		r = fr.GetRepeated().GetItems().GetString_()
	}
	if r == nil {
		if fr.GetType() != nil && !fd.IsList() || fd.IsList() && fr.GetRepeated().GetItems() != nil {
			return nil, fmt.Errorf("stamp: %s has rules that are not string rules", fd.FullName())
		}
		return nil, nil
	}
	if r.Const != nil || r.Pattern != nil || len(r.In) > 0 || len(r.NotIn) > 0 || r.WellKnown != nil {
		return nil, fmt.Errorf("stamp: %s has rules a stamp cannot check (%v): render it as a message", fd.FullName(), r)
	}
	return r, nil
}

// checkValue reports whether v, a stamped value of field fd, breaks its
// rules r (see checkable), as protoc-gen-validate would.
func checkValue(fd protoreflect.FieldDescriptor, r *validate.StringRules, v string) error {
	if !utf8.ValidString(v) {
		return fmt.Errorf("%s: %q is not valid UTF-8", fd.FullName(), v)
	}
	if r == nil || r.GetIgnoreEmpty() && v == "" {
		return nil
	}
	runes := uint64(utf8.RuneCountInString(v))
	var errs []error
	// breaks records that v breaks a rule, described by format and args
	// (only then: most values break none).
	breaks := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("%s: %q breaks its rule %s", fd.FullName(), v, fmt.Sprintf(format, args...)))
	}
	brokenLengths(r, uint64(len(v)), runes, func(rule string, bound uint64) { breaks("%s %d", rule, bound) })
	if r.Prefix != nil && !strings.HasPrefix(v, r.GetPrefix()) {
		breaks("prefix %q", r.GetPrefix())
	}
	if r.Suffix != nil && !strings.HasSuffix(v, r.GetSuffix()) {
		breaks("suffix %q", r.GetSuffix())
	}
	if r.Contains != nil && !strings.Contains(v, r.GetContains()) {
		breaks("contains %q", r.GetContains())
	}
	if r.NotContains != nil && strings.Contains(v, r.GetNotContains()) {
		breaks("not_contains %q", r.GetNotContains())
	}
	return errors.Join(errs...)
}

// lengthsOnly reports whether rules r look only at a value's length (in
// bytes or runes), not at its content.
func lengthsOnly(r *validate.StringRules) bool {
	return r.Prefix == nil && r.Suffix == nil && r.Contains == nil && r.NotContains == nil
}

// lengthsHold reports whether a value of n bytes and runes runes meets the
// length rules of r (an empty value meets them all when r ignores empty
// ones, as in checkValue).
func lengthsHold(r *validate.StringRules, n, runes uint64) bool {
	if r.GetIgnoreEmpty() && n == 0 {
		return true
	}
	held := true
	brokenLengths(r, n, runes, func(string, uint64) { held = false })
	return held
}

// brokenLengths calls broke with the name and bound of each length rule of
// r that a value of n bytes and runes runes breaks.
func brokenLengths(r *validate.StringRules, n, runes uint64, broke func(rule string, bound uint64)) {
	if r.Len != nil && runes != r.GetLen() {
		broke("len", r.GetLen())
	}
	if r.MinLen != nil && runes < r.GetMinLen() {
		broke("min_len", r.GetMinLen())
	}
	if r.MaxLen != nil && runes > r.GetMaxLen() {
		broke("max_len", r.GetMaxLen())
	}
	if r.LenBytes != nil && n != r.GetLenBytes() {
		broke("len_bytes", r.GetLenBytes())
	}
	if r.MinBytes != nil && n < r.GetMinBytes() {
		broke("min_bytes", r.GetMinBytes())
	}
	if r.MaxBytes != nil && n > r.GetMaxBytes() {
		broke("max_bytes", r.GetMaxBytes())
	}
}

// write returns the encoding of the stamp with vals in place of its
// placeholders (vals[i] for placeholder i) and spl in place of its
// splices. Call check on vals first.
func (s *stamp) write(vals []string, spl [][]byte) []byte {
	var buf [32]int
	n, sizes := s.measure(vals, spl, buf[:0])
	out, _ := s.fill(make([]byte, 0, n), vals, spl, sizes)
	return out
}

// measure returns the length of the stamp's encoding for vals and spl,
// and appends to sizes the length of each of its nested messages, in the
// order fill writes them.
func (s *stamp) measure(vals []string, spl [][]byte, sizes []int) (int, []int) {
	n := 0
	for i := range s.parts {
		p := &s.parts[i]
		n += len(p.lit)
		var l int
		switch {
		case p.splice > 0:
			l = len(spl[p.splice-1])
		case p.hole != nil:
			l = holeLen(p.hole, vals)
		case p.nested != nil:
			at := len(sizes)
			sizes = append(sizes, 0)
			l, sizes = p.nested.measure(vals, spl, sizes)
			sizes[at] = l
		default:
			continue
		}
		n += protowire.SizeVarint(uint64(l)) + l
	}
	return n, sizes
}

// fill appends to dst the encoding of the stamp with vals and spl, its
// nested messages' lengths taken from sizes (see measure), and returns it
// with the lengths it did not take.
func (s *stamp) fill(dst []byte, vals []string, spl [][]byte, sizes []int) ([]byte, []int) {
	for i := range s.parts {
		p := &s.parts[i]
		dst = append(dst, p.lit...)
		switch {
		case p.splice > 0:
			dst = protowire.AppendBytes(dst, spl[p.splice-1])
		case p.hole != nil:
			dst = protowire.AppendVarint(dst, uint64(holeLen(p.hole, vals)))
			for _, sg := range p.hole {
				if sg.ph < 0 {
					dst = append(dst, sg.text...)
				} else {
					dst = append(dst, vals[sg.ph]...)
				}
			}
		case p.nested != nil:
			dst = protowire.AppendVarint(dst, uint64(sizes[0]))
			dst, sizes = p.nested.fill(dst, vals, spl, sizes[1:])
		}
	}
	return dst, sizes
}

func holeLen(segs []stampSeg, vals []string) int {
	n := 0
	for _, sg := range segs {
		if sg.ph < 0 {
			n += len(sg.text)
		} else {
			n += len(vals[sg.ph])
		}
	}
	return n
}

// holeRunes is the number of runes of the value a hole takes with vals
// (all valid UTF-8: see check).
func holeRunes(segs []stampSeg, vals []string) int {
	n := 0
	for _, sg := range segs {
		if sg.ph < 0 {
			n += utf8.RuneCountInString(sg.text)
		} else {
			n += utf8.RuneCountInString(vals[sg.ph])
		}
	}
	return n
}

// holeValue is the value a hole takes with vals.
func holeValue(segs []stampSeg, vals []string) string {
	if len(segs) == 1 { // a placeholder or text alone: no new string
		if sg := segs[0]; sg.ph >= 0 {
			return vals[sg.ph]
		}
		return segs[0].text
	}
	var b strings.Builder
	b.Grow(holeLen(segs, vals))
	writeJoined(&b, segs, vals)
	return b.String()
}

// check reports every hole whose value with vals breaks its field's
// validation rules. Each value must be valid UTF-8 (then so is every
// hole, the template's text being so); a hole is made into a string only
// for a rule on its content.
func (s *stamp) check(vals []string) error {
	for i, v := range vals {
		if !utf8.ValidString(v) {
			return fmt.Errorf("the value of placeholder %d, %q, is not valid UTF-8", i, v)
		}
	}
	return s.checkRules(vals)
}

func (s *stamp) checkRules(vals []string) error {
	var errs []error
	for i := range s.parts {
		p := &s.parts[i]
		switch {
		case p.hole != nil && p.rules != nil:
			if lengthsOnly(p.rules) && lengthsHold(p.rules, uint64(holeLen(p.hole, vals)), uint64(holeRunes(p.hole, vals))) {
				continue // the value is not made to be checked
			}
			if err := checkValue(p.field, p.rules, holeValue(p.hole, vals)); err != nil {
				errs = append(errs, err)
			}
		case p.nested != nil:
			if err := p.nested.checkRules(vals); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}
