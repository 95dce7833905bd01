package xds

import (
	"bytes"
	"crypto/x509"
	"encoding/json"
	"encoding/pem"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/cncf/xds/go/udpa/annotations"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/descriptorpb"
	"google.golang.org/protobuf/types/known/anypb"

	"github.com/osm-vm/osm-vm/internal/xds/cache"
)

// ProxyStatus is one row of GET /debug/proxies.
type ProxyStatus struct {
	Proxy
	// Types are the per-type versions published, sent, ACKed and the last NACK.
	Types []cache.TypeStatus `json:"types"`
	// RenderError is the last error rendering this proxy's configuration;
	// while set the proxy keeps its last good configuration.
	RenderError string `json:"renderError,omitempty"`
}

// Debug serves the xDS debug views.
type Debug struct {
	Server    *Server
	Cache     *cache.Cache
	Publisher *Publisher
}

// Proxies returns every connected proxy with its xDS state.
func (d Debug) Proxies() []ProxyStatus {
	var out []ProxyStatus
	for _, p := range d.Server.Proxies() {
		ps := ProxyStatus{Proxy: p, Types: d.Cache.Status(p.NodeID)}
		if d.Publisher != nil {
			ps.RenderError = d.Publisher.RenderError(p.NodeID)
		}
		out = append(out, ps)
	}
	return out
}

// Config returns the configuration published for a proxy, as JSON: per
// type URL, the resources in protojson, every secret in them redacted
// (see Redact). proxy is a node ID or a CN (the Envoy flavour is preferred
// for a CN with both).
func (d Debug) Config(proxy string) (json.RawMessage, error) {
	view := d.Cache.View(proxy)
	if view == nil {
		view = d.Cache.View(proxy + "~grpc")
	}
	if view == nil {
		return nil, fmt.Errorf("no configuration published for proxy %q (GET /debug/proxies lists the connected ones)", proxy)
	}
	types := slices.Sorted(maps.Keys(view))
	var b strings.Builder
	b.WriteString("{")
	for i, t := range types {
		if i > 0 {
			b.WriteString(",")
		}
		name, _ := json.Marshal(t)
		b.Write(name)
		b.WriteString(":[")
		for j, r := range view[t].Resources() {
			if j > 0 {
				b.WriteString(",")
			}
			m := r.Message()
			if m == nil {
				return nil, fmt.Errorf("encode %s %s: its bytes do not decode (a bug: please report it)", t, r.Name())
			}
			js, err := protojson.Marshal(Redact(m))
			if err != nil {
				return nil, fmt.Errorf("encode %s %s: %w", t, r.Name(), err)
			}
			b.Write(js)
		}
		b.WriteString("]")
	}
	b.WriteString("}")
	return json.RawMessage(b.String()), nil
}

// Redact returns a copy of m, in which every secret is replaced by a note
// saying what it was; m itself is not changed (the cache's messages are
// shared with the proxies they are sent to). A secret is:
//
//   - any field Envoy's protos mark (udpa.annotations.sensitive): TLS private
//     keys, PKCS#12 bundles, key passwords, session ticket keys, generic
//     secrets, private key provider configs;
//   - any string or bytes field anywhere that holds a PEM private key, or
//     bytes that parse as a DER private key, whatever its field.
//
// Redact descends into every message, list and map, and into every
// google.protobuf.Any it can resolve (typed configs: transport sockets,
// filters), so a key is redacted wherever a resource carries it. A private
// key is described by the certificate beside it (serial, SANs, expiry);
// an Any that does not resolve and holds a private key loses its value.
func Redact(m proto.Message) proto.Message {
	c := proto.Clone(m)
	redactMessage(c.ProtoReflect())
	return c
}

const (
	dataSourceName = "envoy.config.core.v3.DataSource"
	redactedPrefix = "[redacted: "
)

func redactMessage(m protoreflect.Message) {
	if a, ok := m.Interface().(*anypb.Any); ok {
		redactAny(a, redactMessage)
		return
	}
	for _, f := range populated(m) {
		if sensitive(f) {
			redactField(m, f, redactionNote(m, f))
			continue
		}
		v := m.Get(f)
		switch {
		case f.IsList():
			l := v.List()
			for i := range l.Len() {
				switch {
				case f.Message() != nil:
					redactMessage(l.Get(i).Message())
				case holdsPrivateKey(l.Get(i)):
					l.Set(i, noteValue(f, keyNote(f)))
				}
			}
		case f.IsMap():
			v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
				switch {
				case f.MapValue().Message() != nil:
					redactMessage(e.Message())
				case holdsPrivateKey(e):
					v.Map().Set(k, noteValue(f.MapValue(), keyNote(f)))
				}
				return true
			})
		case f.Message() != nil:
			redactMessage(v.Message())
		case holdsPrivateKey(v):
			m.Set(f, noteValue(f, keyNote(f)))
		}
	}
}

// redactField replaces the whole of a sensitive field with note.
func redactField(m protoreflect.Message, f protoreflect.FieldDescriptor, note string) {
	v := m.Get(f)
	switch {
	case f.IsList():
		l := v.List()
		for i := range l.Len() {
			if f.Message() != nil {
				redactAll(l.Get(i).Message(), note)
			} else {
				l.Set(i, noteValue(f, note))
			}
		}
	case f.IsMap():
		v.Map().Range(func(k protoreflect.MapKey, e protoreflect.Value) bool {
			if f.MapValue().Message() != nil {
				redactAll(e.Message(), note)
			} else {
				v.Map().Set(k, noteValue(f.MapValue(), note))
			}
			return true
		})
	case f.Message() != nil:
		redactAll(v.Message(), note)
	case f.Kind() == protoreflect.StringKind || f.Kind() == protoreflect.BytesKind:
		m.Set(f, noteValue(f, note))
	default:
		m.Clear(f) // a sensitive number or enum: nothing to describe it by
	}
}

// redactAll replaces every leaf of a sensitive message with note. A
// DataSource becomes an inline string, so the note reads as text.
func redactAll(m protoreflect.Message, note string) {
	d := m.Descriptor()
	if d.FullName() == dataSourceName {
		for _, f := range populated(m) {
			m.Clear(f)
		}
		m.Set(d.Fields().ByName("inline_string"), protoreflect.ValueOfString(note))
		return
	}
	if a, ok := m.Interface().(*anypb.Any); ok {
		redactAny(a, func(inner protoreflect.Message) { redactAll(inner, note) })
		return
	}
	for _, f := range populated(m) {
		redactField(m, f, note)
	}
}

// redactAny redacts the message an Any holds with redact and packs it
// again. An Any whose type does not resolve cannot be read field by field:
// it keeps its value unless the value holds a private key.
func redactAny(a *anypb.Any, redact func(protoreflect.Message)) {
	inner, err := a.UnmarshalNew()
	if err != nil {
		if bytes.Contains(a.Value, []byte("PRIVATE KEY")) {
			a.Value = nil
		}
		return
	}
	redact(inner.ProtoReflect())
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(inner)
	if err != nil { // cannot happen for a message just unmarshalled
		a.Value = nil
		return
	}
	a.Value = b
}

// populated returns m's set fields; m is changed only after ranging.
func populated(m protoreflect.Message) []protoreflect.FieldDescriptor {
	var fs []protoreflect.FieldDescriptor
	m.Range(func(f protoreflect.FieldDescriptor, _ protoreflect.Value) bool {
		fs = append(fs, f)
		return true
	})
	return fs
}

func sensitive(f protoreflect.FieldDescriptor) bool {
	opts, ok := f.Options().(*descriptorpb.FieldOptions)
	if !ok || opts == nil {
		return false
	}
	s, _ := proto.GetExtension(opts, annotations.E_Sensitive).(bool)
	return s
}

// holdsPrivateKey reports whether a string or bytes value is, or contains,
// a private key.
func holdsPrivateKey(v protoreflect.Value) bool {
	switch x := v.Interface().(type) {
	case string:
		return strings.Contains(x, "PRIVATE KEY")
	case []byte:
		if bytes.Contains(x, []byte("PRIVATE KEY")) {
			return true
		}
		if _, err := x509.ParsePKCS8PrivateKey(x); err == nil {
			return true
		}
		if _, err := x509.ParseECPrivateKey(x); err == nil {
			return true
		}
		_, err := x509.ParsePKCS1PrivateKey(x)
		return err == nil
	}
	return false
}

func noteValue(f protoreflect.FieldDescriptor, note string) protoreflect.Value {
	if f.Kind() == protoreflect.BytesKind {
		return protoreflect.ValueOfBytes([]byte(note))
	}
	return protoreflect.ValueOfString(note)
}

func keyNote(f protoreflect.FieldDescriptor) string {
	return redactedPrefix + "a private key in " + string(f.FullName()) + "]"
}

// redactionNote says what the sensitive field f of m held: for a private
// key, the certificate beside it in m (certificate_chain).
func redactionNote(m protoreflect.Message, f protoreflect.FieldDescriptor) string {
	what := string(f.FullName())
	if f.Name() != "private_key" {
		return redactedPrefix + what + "]"
	}
	chain := m.Descriptor().Fields().ByName("certificate_chain")
	if chain == nil || chain.Message() == nil || chain.Message().FullName() != dataSourceName || !m.Has(chain) {
		return redactedPrefix + "private key, " + what + "]"
	}
	ds := m.Get(chain).Message()
	var pemBytes []byte
	for _, name := range []protoreflect.Name{"inline_bytes", "inline_string"} {
		if fd := ds.Descriptor().Fields().ByName(name); fd != nil && ds.Has(fd) {
			if name == "inline_bytes" {
				pemBytes = ds.Get(fd).Bytes()
			} else {
				pemBytes = []byte(ds.Get(fd).String())
			}
		}
	}
	if fd := ds.Descriptor().Fields().ByName("filename"); fd != nil && ds.Has(fd) {
		return redactedPrefix + "private key of the certificate in " + ds.Get(fd).String() + "]"
	}
	block, _ := pem.Decode(pemBytes)
	if block == nil {
		return redactedPrefix + "private key, " + what + "]"
	}
	cert, err := x509.ParseCertificate(block.Bytes)
	if err != nil {
		return redactedPrefix + "private key, " + what + "]"
	}
	return redactedPrefix + describeCertificate(cert, "private key of the certificate") + "]"
}

// describeCertificate names a certificate by serial (lower-case hex, as
// certificate.Certificate.GetSerialNumber), SANs and expiry.
func describeCertificate(cert *x509.Certificate, what string) string {
	var sans []string
	for _, u := range cert.URIs {
		sans = append(sans, u.String())
	}
	sans = append(sans, cert.DNSNames...)
	for _, ip := range cert.IPAddresses {
		sans = append(sans, ip.String())
	}
	if len(sans) == 0 {
		sans = append(sans, "none")
	}
	return fmt.Sprintf("%s serial %s, SAN %s, expires %s", what, cert.SerialNumber.Text(16), strings.Join(sans, " "), cert.NotAfter.UTC().Format(time.RFC3339))
}
