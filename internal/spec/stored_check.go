package spec

import (
	"strings"
	"sync"
)

// storedCheck re-validates the specification as read from the store: a
// document stored by an earlier osm-server, or by a replica running an
// older version, may not pass this version's checks (a new bound, a
// reference that must now exist). It is still served as stored, since
// it is the mesh's last applied state and refusing it would drop traffic,
// but every such problem is logged once, naming the document, the field
// and the fix, until the document changes.
type storedCheck struct {
	mu     sync.Mutex
	logged map[Key]string // the problems last logged per document
}

// check returns the problems of each invalid document in st, and which
// of them were not reported before.
func (c *storedCheck) check(st *state) (invalid map[Key][]FieldError, fresh []Key) {
	invalid = map[Key][]FieldError{}
	for _, k := range sortedObjectKeys(st.objects) {
		obj := st.objects[k]
		v := &validator{doc: "stored " + k.String()}
		if ki, ok := lookupKind(k.Kind); ok {
			validateMeta(v, ki, obj.meta())
		}
		obj.validate(v)
		checkReferences(v, st, obj)
		if len(v.errs) > 0 {
			invalid[k] = v.errs
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	next := make(map[Key]string, len(invalid))
	for _, k := range sortedObjectKeys(st.objects) {
		errs, ok := invalid[k]
		if !ok {
			continue
		}
		msgs := make([]string, len(errs))
		for i, e := range errs {
			msgs[i] = e.Error()
		}
		text := strings.Join(msgs, "; ")
		next[k] = text
		if c.logged[k] != text {
			fresh = append(fresh, k)
		}
	}
	c.logged = next
	return invalid, fresh
}

// checkStored logs the problems of st's documents not logged before.
func (s *Spec) checkStored(st *state) {
	invalid, fresh := s.stored.check(st)
	for _, k := range fresh {
		for _, e := range invalid[k] {
			s.log.Error("a stored document does not pass this version's validation; it is served as stored until it is fixed: apply a corrected version (osm-server get shows it) or delete it",
				"document", k.String(), "field", e.Field, "problem", e.Message)
		}
	}
}
