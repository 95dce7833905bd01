package spec

import (
	"bytes"
	"cmp"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"slices"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// Document is one parsed, defaulted and individually validated document,
// with where it came from.
type Document struct {
	Object Object
	// Source names the file ("-" for stdin, "" when unknown).
	Source string
	// Index is the document's 1-based position in its source.
	Index int
	// Line is the line the document starts on, 0 when unknown.
	Line int
}

// Key names the document.
func (d Document) Key() Key { return d.Object.Key() }

// describe returns `Service default/bookstore (mesh.yaml document 2, line 14)`.
func (d Document) describe() string {
	return describe(d.Key(), d.Source, d.Index, d.Line)
}

func describe(k Key, source string, index, line int) string {
	s := k.String()
	switch {
	case k.Kind == "" && k.Name == "":
		s = "document"
	case k.Kind == "":
		s = "document " + k.Name
	case k.Name == "":
		s = k.Kind + " (unnamed)"
	}
	var where []string
	if source != "" {
		where = append(where, source)
	}
	if index > 0 {
		where = append(where, fmt.Sprintf("document %d", index))
	}
	if line > 0 {
		where = append(where, fmt.Sprintf("line %d", line))
	}
	if len(where) > 0 {
		if source != "" && len(where) > 1 {
			s += " (" + where[0] + " " + strings.Join(where[1:], ", ") + ")"
		} else {
			s += " (" + strings.Join(where, ", ") + ")"
		}
	}
	return s
}

// ErrInvalid is wrapped by every ValidationError.
var ErrInvalid = errors.New("invalid mesh specification")

// FieldError is one problem of a document: the document, the field path
// (such as spec.ports[0].port; empty for the whole document) and what is
// wrong and how to fix it. It is the API's document, so a client reads it
// without linking this package.
type FieldError = meshapi.FieldError

// ValidationError lists every problem found in a batch.
type ValidationError struct {
	Errors []FieldError `json:"errors"`
}

func (e *ValidationError) Error() string {
	msgs := make([]string, len(e.Errors))
	for i, fe := range e.Errors {
		msgs[i] = fe.Error()
	}
	return strings.Join(msgs, "\n")
}

// Unwrap makes errors.Is(err, ErrInvalid) true.
func (e *ValidationError) Unwrap() error { return ErrInvalid }

// validator collects the errors and warnings of one document.
type validator struct {
	doc      string
	errs     []FieldError
	warnings []string
}

func (v *validator) errorf(field, format string, args ...any) {
	v.errs = append(v.errs, FieldError{Document: v.doc, Field: field, Message: fmt.Sprintf(format, args...)})
}

// Errorf, Warnf, CheckRegex, CheckPort and DidYouMean make a validator
// the Checker of the Gateway API's field rules (package gateway).
func (v *validator) Errorf(field, format string, args ...any) { v.errorf(field, format, args...) }
func (v *validator) Warnf(field, format string, args ...any)  { v.warnf(field, format, args...) }
func (v *validator) CheckRegex(field, re string)              { checkRegex(v, field, re) }
func (v *validator) CheckPort(field string, port int)         { checkPort(v, field, port) }
func (v *validator) DidYouMean(s string, candidates []string) string {
	return didYouMean(s, candidates)
}

func (v *validator) warnf(field, format string, args ...any) {
	fe := FieldError{Document: v.doc, Field: field, Message: fmt.Sprintf(format, args...)}
	v.warnings = append(v.warnings, fe.Error())
}

// Parse reads YAML (several documents separated by "---") or JSON (one
// object, an array of objects, or a List with items) and returns the
// documents, defaulted and validated on their own. source names the input
// in errors. All document errors are returned together in a
// *ValidationError; references between documents are checked on apply.
// Documents larger than the limits (see MaxRequestBytes) are refused
// before they are decoded.
func Parse(data []byte, source string) ([]Document, error) {
	budget := int64(maxRequestExpandedBytes)
	return parse(data, source, &budget)
}

// parse is Parse, taking the expanded size of its documents from budget.
func parse(data []byte, source string, budget *int64) ([]Document, error) {
	if n := nodeBound(data); n > maxRequestNodes {
		return nil, &ValidationError{Errors: []FieldError{{
			Document: describe(Key{}, source, 1, 0),
			Message:  fmt.Sprintf("%s may hold up to %d YAML nodes (counted from its separators and line breaks), over the limit of %d per file: split it into several requests", cmp.Or(source, "the request"), n, maxRequestNodes),
		}}}
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var (
		docs  []Document
		errs  []FieldError
		index int
	)
	for {
		var node yaml.Node
		err := dec.Decode(&node)
		if errors.Is(err, io.EOF) {
			break
		}
		index++
		if err != nil {
			errs = append(errs, FieldError{Document: describe(Key{}, source, index, 0), Message: fmt.Sprintf("cannot parse YAML: %v", err)})
			break
		}
		root := &node
		if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
			root = root.Content[0]
		}
		items := []*yaml.Node{root}
		if root.Kind == yaml.SequenceNode {
			items = root.Content
		} else if isList(root) {
			items = listItems(root)
		}
		// Anchors are per YAML document: one expander measures its items.
		exp := newExpander(maxDocumentBytes)
		for _, n := range items {
			if n.Kind == yaml.ScalarNode && n.Tag == "!!null" || n.Kind == 0 {
				continue // empty document
			}
			if fe, ok := checkExpanded(exp, n, source, index, budget); !ok {
				errs = append(errs, fe)
				if *budget < 0 {
					return docs, &ValidationError{Errors: errs}
				}
				continue
			}
			d, fes := parseOne(n, source, index)
			errs = append(errs, fes...)
			if d != nil {
				docs = append(docs, *d)
			}
		}
	}
	if len(errs) > 0 {
		return docs, &ValidationError{Errors: errs}
	}
	return docs, nil
}

// checkExpanded measures n with YAML aliases expanded and takes its size
// from budget; it refuses n when n is over the document limit, and the
// rest of the request when the budget runs out (budget then < 0).
func checkExpanded(exp *expander, n *yaml.Node, source string, index int, budget *int64) (FieldError, bool) {
	target := n
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		target = n.Alias
	}
	fe := FieldError{Document: describe(peekKey(target), source, index, n.Line)}
	size, err := exp.size(n)
	switch {
	case err != nil:
		fe.Message = fmt.Sprintf("a YAML alias (line %d) refers to a node that contains it: remove the alias", exp.cycle.Line)
		return fe, false
	case size > maxDocumentBytes:
		fe.Message = fmt.Sprintf("more than %s with YAML aliases expanded, over the limit of %s per document: split it into smaller documents", sizeString(maxDocumentBytes), sizeString(maxDocumentBytes))
		return fe, false
	}
	if *budget -= size; *budget < 0 {
		fe.Message = fmt.Sprintf("the documents of this request add up to more than %s with YAML aliases expanded, over the limit of %s per request: split the batch", sizeString(maxRequestExpandedBytes), sizeString(maxRequestExpandedBytes))
		return fe, false
	}
	return FieldError{}, true
}

func isList(n *yaml.Node) bool {
	if n.Kind != yaml.MappingNode {
		return false
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "kind" && strings.HasSuffix(n.Content[i+1].Value, "List") {
			return true
		}
	}
	return false
}

func listItems(n *yaml.Node) []*yaml.Node {
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == "items" && n.Content[i+1].Kind == yaml.SequenceNode {
			return n.Content[i+1].Content
		}
	}
	return nil
}

func supportedKinds() string {
	var s []string
	for _, k := range kinds {
		s = append(s, k.apiVersion+" "+k.kind)
	}
	for _, f := range forms {
		s = append(s, f.apiVersion+" "+f.kind)
	}
	return strings.Join(s, ", ")
}

func parseOne(n *yaml.Node, source string, index int) (*Document, []FieldError) {
	line := n.Line
	bad := func(k Key, field, format string, args ...any) []FieldError {
		return []FieldError{{Document: describe(k, source, index, line), Field: field, Message: fmt.Sprintf(format, args...)}}
	}
	if n.Kind != yaml.MappingNode {
		return nil, bad(Key{}, "", "want a mapping with apiVersion, kind, metadata and spec")
	}
	var raw any
	if err := n.Decode(&raw); err != nil {
		return nil, bad(Key{}, "", "cannot decode: %v", err)
	}
	m, ok := raw.(map[string]any)
	if !ok {
		return nil, bad(Key{}, "", "want a mapping with string keys")
	}
	kind, _ := m["kind"].(string)
	apiVersion, _ := m["apiVersion"].(string)
	var name, namespace string
	if md, ok := m["metadata"].(map[string]any); ok {
		name, _ = md["name"].(string)
		namespace, _ = md["namespace"].(string)
	}
	k := Key{Kind: kind, Namespace: namespace, Name: name}
	if kind == "" {
		return nil, bad(k, "kind", "missing: want one of %s", supportedKinds())
	}
	ki, ok := lookupKind(kind)
	if ok && ki.namespaced && k.Namespace == "" {
		k.Namespace = DefaultNamespace
	}
	if !ok {
		var names []string
		for _, k := range kinds {
			names = append(names, k.kind)
		}
		return nil, bad(k, "kind", "unsupported kind %q: want one of %s%s", kind, supportedKinds(), didYouMean(kind, names))
	}
	obj, ok := newObjectFor(ki, apiVersion)
	if !ok {
		return nil, bad(k, "apiVersion", "%s needs apiVersion %s, not %q", kind, apiVersionsOf(ki), apiVersion)
	}
	var fes []FieldError
	for _, u := range unknownFields(raw, reflect.TypeOf(obj).Elem(), "") {
		fes = append(fes, FieldError{Document: describe(k, source, index, line), Field: u.path, Message: u.msg})
	}
	if len(fes) > 0 {
		return nil, fes
	}
	js, err := json.Marshal(raw)
	if err != nil {
		return nil, bad(k, "", "cannot convert to JSON: %v", err)
	}
	if len(js) > maxDocumentBytes {
		return nil, bad(k, "", "%d bytes as JSON, over the limit of %s per document: split it into smaller documents", len(js), sizeString(maxDocumentBytes))
	}
	if err := json.Unmarshal(js, obj); err != nil {
		var te *json.UnmarshalTypeError
		if errors.As(err, &te) {
			return nil, bad(k, te.Field, "got a %s, want a %s", te.Value, jsonTypeName(te.Type))
		}
		return nil, bad(k, "", "%v", err)
	}
	if ki.namespaced && obj.meta().Namespace == "" {
		obj.meta().Namespace = DefaultNamespace
	}
	obj.setDefaults()
	d := &Document{Object: obj, Source: source, Index: index, Line: line}
	v := &validator{doc: d.describe()}
	validateMeta(v, ki, obj.meta())
	obj.validate(v)
	if len(v.errs) > 0 {
		return nil, v.errs
	}
	return d, nil
}

func jsonTypeName(t reflect.Type) string {
	switch t.Kind() {
	case reflect.Int, reflect.Int64, reflect.Int32, reflect.Uint16:
		return "whole number"
	case reflect.Float64:
		return "number"
	case reflect.String:
		return "string"
	case reflect.Bool:
		return "boolean (true or false)"
	case reflect.Slice:
		return "list"
	case reflect.Map, reflect.Struct:
		return "mapping"
	}
	return t.String()
}

func validateMeta(v *validator, ki kindInfo, m *ObjectMeta) {
	if err := mesh.ValidateLabel("name", m.Name); err != nil {
		v.errorf("metadata.name", "%v", err)
	}
	if !ki.namespaced {
		if m.Namespace != "" {
			v.errorf("metadata.namespace", "%s is mesh-wide: remove metadata.namespace", ki.kind)
		}
		return
	}
	if err := mesh.ValidateLabel("namespace", m.Namespace); err != nil {
		v.errorf("metadata.namespace", "%v", err)
	}
}

type unknownField struct{ path, msg string }

// unknownFields walks a decoded YAML value against the Go type it will be
// decoded into and reports keys that match no field.
func unknownFields(v any, t reflect.Type, path string) []unknownField {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == reflect.TypeFor[Duration]() {
		str, ok := v.(string)
		if !ok {
			return []unknownField{{path, fmt.Sprintf("got %s, want a duration such as \"24h\" or \"90m\"", describeValue(v))}}
		}
		if _, err := time.ParseDuration(str); err != nil {
			return []unknownField{{path, fmt.Sprintf("%q is not a duration: want a value such as \"24h\" or \"90m\"", str)}}
		}
		return nil
	}
	if v == nil {
		return nil // null leaves the zero value
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[json.Unmarshaler]()) {
		return nil // decodes itself (Kubernetes' int-or-string, durations): json reports its errors
	}
	switch t.Kind() {
	case reflect.Int:
		if _, ok := v.(int); !ok {
			return []unknownField{{path, fmt.Sprintf("got %s, want a whole number", describeValue(v))}}
		}
		return nil
	case reflect.Float64:
		switch v.(type) {
		case int, float64:
			return nil
		}
		return []unknownField{{path, fmt.Sprintf("got %s, want a number", describeValue(v))}}
	case reflect.String:
		if _, ok := v.(string); !ok {
			return []unknownField{{path, fmt.Sprintf("got %s, want a string (quote it)", describeValue(v))}}
		}
		return nil
	case reflect.Bool:
		if _, ok := v.(bool); !ok {
			return []unknownField{{path, fmt.Sprintf("got %s, want true or false", describeValue(v))}}
		}
		return nil
	case reflect.Map:
		m, ok := v.(map[string]any)
		if !ok {
			return []unknownField{{path, fmt.Sprintf("got %s, want a mapping", describeValue(v))}}
		}
		var out []unknownField
		for _, k := range sortedKeys(m) {
			out = append(out, unknownFields(m[k], t.Elem(), path+"."+k)...)
		}
		return out
	case reflect.Struct:
		m, ok := v.(map[string]any)
		if !ok {
			return []unknownField{{path, fmt.Sprintf("got %s, want a mapping", describeValue(v))}}
		}
		fields := jsonFields(t)
		keys := make([]string, 0, len(m))
		for k := range m {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		var out []unknownField
		for _, k := range keys {
			ft, ok := fields[k]
			p := joinPath(path, k)
			if !ok {
				names := make([]string, 0, len(fields))
				for n := range fields {
					names = append(names, n)
				}
				slices.Sort(names)
				out = append(out, unknownField{p, fmt.Sprintf("unknown field %q: remove it or use one of %s%s", k, strings.Join(names, ", "), didYouMean(k, names))})
				continue
			}
			out = append(out, unknownFields(m[k], ft, p)...)
		}
		return out
	case reflect.Slice:
		s, ok := v.([]any)
		if !ok {
			if v != nil {
				return []unknownField{{path, fmt.Sprintf("got %s, want a list", describeValue(v))}}
			}
			return nil
		}
		var out []unknownField
		for i, e := range s {
			out = append(out, unknownFields(e, t.Elem(), fmt.Sprintf("%s[%d]", path, i))...)
		}
		return out
	}
	return nil
}

func describeValue(v any) string {
	switch x := v.(type) {
	case string:
		return fmt.Sprintf("the string %q", x)
	case int, int64, uint64, float64:
		return fmt.Sprintf("the number %v", x)
	case bool:
		return fmt.Sprintf("%v", x)
	case []any:
		return "a list"
	case map[string]any:
		return "a mapping"
	}
	return fmt.Sprintf("a %T", v)
}

func joinPath(path, k string) string {
	if path == "" {
		return k
	}
	return path + "." + k
}

// jsonFields maps JSON names to field types, flattening embedded structs.
func jsonFields(t reflect.Type) map[string]reflect.Type {
	out := map[string]reflect.Type{}
	for i := range t.NumField() {
		f := t.Field(i)
		name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
		if f.Anonymous && name == "" {
			for k, v := range jsonFields(f.Type) {
				out[k] = v
			}
			continue
		}
		if name == "" {
			name = f.Name
		}
		if name == "-" {
			continue
		}
		out[name] = f.Type
	}
	return out
}

// didYouMean returns ` (did you mean "x"?)` for the closest candidate
// within a small edit distance, or "".
func didYouMean(s string, candidates []string) string {
	best, bestD := "", 0
	for _, c := range candidates {
		if c == s {
			continue
		}
		d := editDistance(strings.ToLower(s), strings.ToLower(c))
		if best == "" || d < bestD {
			best, bestD = c, d
		}
	}
	limit := max(1, min(3, len(s)/3))
	if best == "" || bestD > limit {
		return ""
	}
	return fmt.Sprintf(" (did you mean %q?)", best)
}

func editDistance(a, b string) int {
	if len(a) > 64 || len(b) > 64 {
		return max(len(a), len(b))
	}
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
