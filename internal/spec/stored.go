package spec

import (
	"encoding/json"
	"fmt"

	"github.com/osm-vm/osm-vm/internal/spec/specstore"
)

// Store is what spec needs from the server's store (specstore keeps the
// specification's entries in it).
type Store = specstore.Store

// stateOf decodes what l shows.
func stateOf(l *specstore.Listing) (*state, error) {
	st := &state{objects: map[Key]Object{}, names: &kindIndex{}}
	vips, size, err := l.Read(func(where string, raw json.RawMessage) error {
		obj, err := decodeObject(raw)
		if err != nil {
			return fmt.Errorf("%s: %w", where, err)
		}
		st.objects[obj.Key()] = obj
		return nil
	})
	if err != nil {
		return nil, err
	}
	st.vips, st.size = vips, size
	return st, nil
}

// decodeObject decodes one stored document.
func decodeObject(r json.RawMessage) (Object, error) {
	var tm TypeMeta
	if err := json.Unmarshal(r, &tm); err != nil {
		return nil, fmt.Errorf("decode stored document: %w", err)
	}
	ki, ok := lookupKind(tm.Kind)
	if !ok {
		return nil, fmt.Errorf("stored document has kind %q, which this version does not know: upgrade osm-server", tm.Kind)
	}
	obj, ok := newObjectFor(ki, tm.APIVersion)
	if !ok {
		return nil, fmt.Errorf("stored %s has apiVersion %q, which this version does not know: upgrade osm-server", tm.Kind, tm.APIVersion)
	}
	if err := json.Unmarshal(r, obj); err != nil {
		return nil, fmt.Errorf("decode stored %s: %w", tm.Kind, err)
	}
	return obj, nil
}

func docItem(k Key) string { return specstore.DocItem(k.Kind, k.Namespace, k.Name) }

// encodeItems returns the stored value of every item of st.
func encodeItems(st *state) (map[string][]byte, error) {
	out := make(map[string][]byte, len(st.objects)+len(st.vips))
	for k, obj := range st.objects {
		b, err := encodeDoc(k, obj)
		if err != nil {
			return nil, err
		}
		out[docItem(k)] = b
	}
	for svc, ip := range st.vips {
		out[specstore.VIPItem(svc)] = specstore.EncodeVIP(ip)
	}
	return out, nil
}

func encodeDoc(k Key, obj Object) ([]byte, error) {
	b, err := json.Marshal(obj)
	if err != nil {
		return nil, fmt.Errorf("encode %s: %w", k, err)
	}
	if b, err = specstore.EncodeDoc(b); err != nil {
		return nil, fmt.Errorf("encode %s: %w", k, err)
	}
	return b, nil
}

// encodeDocs returns the stored entries of the documents keys, as they are
// in st: each encoded, or marked deleted when st no longer has it.
func encodeDocs(st *state, keys []Key) (map[string][]byte, error) {
	changes := make(map[string][]byte, len(keys))
	for _, k := range keys {
		obj, ok := st.objects[k]
		if !ok {
			changes[docItem(k)] = specstore.Deleted()
			continue
		}
		raw, err := encodeDoc(k, obj)
		if err != nil {
			return nil, err
		}
		changes[docItem(k)] = raw
	}
	return changes, nil
}
