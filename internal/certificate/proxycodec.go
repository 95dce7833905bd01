package certificate

import (
	"bytes"
	"encoding/json"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// encodeProxy encodes a proxy record as json.Marshal does, byte for byte
// (FuzzEncodeProxy): written directly when its strings are printable ASCII
// that JSON writes as they are, by encoding/json otherwise. A claim or a
// renewal encodes the record it writes.
func encodeProxy(e proxyEntry) ([]byte, error) {
	if b, ok := appendProxy(make([]byte, 0, 512), e); ok {
		return b, nil
	}
	return json.Marshal(e)
}

// appendProxy appends e as json.Marshal writes it, or returns false.
func appendProxy(b []byte, e proxyEntry) ([]byte, bool) {
	if len(e.Previous) > 0 {
		return nil, false
	}
	w := fastEncoder{b: b}
	w.b = append(w.b, `{"cn":`...)
	w.str(e.CN)
	w.b = append(w.b, `,"service":`...)
	w.meshName(e.Service)
	w.b = append(w.b, `,"serviceAccount":`...)
	w.meshName(mesh.MeshService(e.ServiceAccount))
	w.b = append(w.b, `,"state":`...)
	w.str(string(e.State))
	w.b = append(w.b, `,"serial":`...)
	w.str(e.Serial)
	w.b = append(w.b, `,"issued":`...)
	w.time(e.Issued)
	w.b = append(w.b, `,"expires":`...)
	w.time(e.Expires)
	if !e.LastSeen.IsZero() {
		w.b = append(w.b, `,"lastSeen":`...)
		w.time(e.LastSeen)
	}
	if o := e.Overlap; o != nil {
		w.b = append(w.b, `,"overlap":{"serial":`...)
		w.str(o.Serial)
		w.b = append(w.b, `,"expires":`...)
		w.time(o.Expires)
		w.b = append(w.b, '}')
	}
	if e.KeySHA256 != "" {
		w.b = append(w.b, `,"keySHA256":`...)
		w.str(e.KeySHA256)
	}
	w.b = append(w.b, '}')
	return w.b, !w.bad
}

// fastEncoder writes what appendProxy writes; a string or time
// encoding/json would write differently sets bad.
type fastEncoder struct {
	b   []byte
	bad bool
}

func (w *fastEncoder) str(s string) {
	for i := range len(s) {
		// encoding/json escapes '"', '\\', control characters and (for
		// HTML) '<', '>' and '&', and checks UTF-8.
		if c := s[i]; c < 0x20 || c >= 0x7f || c == '"' || c == '\\' || c == '<' || c == '>' || c == '&' {
			w.bad = true
			return
		}
	}
	w.b = append(w.b, '"')
	w.b = append(w.b, s...)
	w.b = append(w.b, '"')
}

func (w *fastEncoder) meshName(n mesh.MeshService) {
	w.b = append(w.b, `{"namespace":`...)
	w.str(n.Namespace)
	w.b = append(w.b, `,"name":`...)
	w.str(n.Name)
	w.b = append(w.b, '}')
}

// time writes t as its MarshalJSON does (RFC 3339, a year in 0-9999).
func (w *fastEncoder) time(t time.Time) {
	w.b = append(w.b, '"')
	b, err := t.AppendText(w.b)
	if err != nil {
		w.bad = true
		return
	}
	w.b = append(b, '"')
}

// decodeProxyFast decodes a proxy record in the exact form json.Marshal
// writes it (fields in order, no white space, ASCII strings without
// escapes, the times as time.Time writes them); ok is false for anything
// else, which encoding/json then decodes. Every connection's stream
// decodes its proxy's record: through encoding/json that cost 30-50 µs of
// server CPU per connection in a reconnect storm or a run of joins (cold
// caches after the TLS handshake), this a few. FuzzDecodeProxyFast checks
// that it never disagrees with encoding/json.
func decodeProxyFast(raw []byte) (e proxyEntry, ok bool) {
	d := fastDecoder{b: raw}
	d.lit(`{"cn":`)
	e.CN = d.str()
	d.lit(`,"service":`)
	e.Service = d.meshName()
	d.lit(`,"serviceAccount":`)
	e.ServiceAccount = mesh.ServiceAccount(d.meshName())
	d.lit(`,"state":`)
	e.State = ProxyState(d.str())
	d.lit(`,"serial":`)
	e.Serial = d.str()
	d.lit(`,"issued":`)
	e.Issued = d.time()
	d.lit(`,"expires":`)
	e.Expires = d.time()
	if d.maybe(`,"lastSeen":`) {
		e.LastSeen = d.time()
	}
	if d.maybe(`,"overlap":{"serial":`) {
		o := &OverlapCertificate{Serial: d.str()}
		d.lit(`,"expires":`)
		o.Expires = d.time()
		d.lit(`}`)
		e.Overlap = o
	}
	if d.maybe(`,"keySHA256":`) {
		e.KeySHA256 = d.str()
	}
	d.lit(`}`)
	if d.bad || len(d.b) != 0 {
		return proxyEntry{}, false
	}
	return e, true
}

// fastDecoder reads the fixed form decodeProxyFast expects; any deviation
// sets bad, after which every read returns a zero value.
type fastDecoder struct {
	b   []byte
	bad bool
}

// lit consumes s, or fails.
func (d *fastDecoder) lit(s string) {
	if !d.maybe(s) {
		d.bad = true
	}
}

// maybe consumes s if the input starts with it.
func (d *fastDecoder) maybe(s string) bool {
	if d.bad || len(d.b) < len(s) || string(d.b[:len(s)]) != s {
		return false
	}
	d.b = d.b[len(s):]
	return true
}

// raw consumes a JSON string of printable ASCII without escapes and
// returns its contents.
func (d *fastDecoder) raw() []byte {
	if d.bad || len(d.b) == 0 || d.b[0] != '"' {
		d.bad = true
		return nil
	}
	end := bytes.IndexByte(d.b[1:], '"')
	if end < 0 {
		d.bad = true
		return nil
	}
	s := d.b[1 : 1+end]
	for _, c := range s {
		// Escapes, control characters and anything not ASCII are
		// encoding/json's to decode (it replaces invalid UTF-8).
		if c < 0x20 || c == '\\' || c >= 0x80 {
			d.bad = true
			return nil
		}
	}
	d.b = d.b[2+end:]
	return s
}

func (d *fastDecoder) str() string { return string(d.raw()) }

// meshName consumes {"namespace":"...","name":"..."}.
func (d *fastDecoder) meshName() mesh.MeshService {
	d.lit(`{"namespace":`)
	ns := d.str()
	d.lit(`,"name":`)
	name := d.str()
	d.lit(`}`)
	return mesh.MeshService{Namespace: ns, Name: name}
}

// time consumes a time as time.Time's MarshalJSON writes it (RFC 3339),
// parsed as its UnmarshalJSON does.
func (d *fastDecoder) time() time.Time {
	s := d.raw()
	var t time.Time
	if d.bad || t.UnmarshalText(s) != nil {
		d.bad = true
		return time.Time{}
	}
	return t
}
