package certificate

import (
	"encoding/json"
	"reflect"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

// proxyCodecRecords are records as the manager writes them: unclaimed,
// claimed, renewed (with an overlap), and one of an older version that
// kept every replaced certificate in previous.
func proxyCodecRecords() []proxyEntry {
	t0 := time.Date(2026, 11, 24, 23, 50, 10, 469171327, time.UTC)
	base := ProxyRecord{
		CN:             "9f1c7a52-0b6e-4c8e-9d1a-2f4b5c6d7e8f.svc-00001.bench",
		Service:        mesh.MeshService{Namespace: "bench", Name: "svc-00001"},
		ServiceAccount: mesh.ServiceAccount{Namespace: "bench", Name: "svc-00001"},
		State:          StateUnclaimed,
		Serial:         "8f3e2a1b4c5d6e7f8091a2b3c4d5e6f7",
		Issued:         t0,
		Expires:        t0.Add(7 * 24 * time.Hour),
	}
	claimed := base
	claimed.State, claimed.LastSeen = StateClaimed, t0.Add(time.Second)
	renewed := claimed
	renewed.Overlap = &OverlapCertificate{Serial: "1a2b", Expires: t0.Add(48 * time.Hour)}
	renewed.KeySHA256 = "5e8c0ffb6bc2e9b0c0a6f4ad7f6d1e2c3b4a59687766554433221100ffeeddcc"
	zoned := claimed
	zoned.LastSeen = t0.In(time.FixedZone("CET", 3600))
	return []proxyEntry{
		{ProxyRecord: base}, {ProxyRecord: claimed}, {ProxyRecord: renewed}, {ProxyRecord: zoned},
		{ProxyRecord: claimed, Previous: []OverlapCertificate{{Serial: "aa", Expires: t0}, {Serial: "bb", Expires: t0.Add(time.Hour)}}},
	}
}

// The records the manager writes take the fast path, and decode as
// encoding/json decodes them.
func TestDecodeProxyFast(t *testing.T) {
	for i, e := range proxyCodecRecords() {
		raw, err := json.Marshal(e)
		if err != nil {
			t.Fatal(err)
		}
		got, ok := decodeProxyFast(raw)
		if len(e.Previous) > 0 {
			if ok {
				t.Errorf("record %d with previous certificates took the fast path: %s", i, raw)
			}
			continue
		}
		if !ok {
			t.Errorf("record %d not decoded by the fast path: %s", i, raw)
			continue
		}
		want := slowDecodeProxy(t, raw)
		if !reflect.DeepEqual(got, want) {
			t.Errorf("record %d: fast %+v, encoding/json %+v", i, got, want)
		}
	}
}

func slowDecodeProxy(t *testing.T, raw []byte) proxyEntry {
	t.Helper()
	var e proxyEntry
	if err := json.Unmarshal(raw, &e); err != nil {
		t.Fatalf("encoding/json refused what the fast path decoded: %v: %q", err, raw)
	}
	return e
}

// FuzzDecodeProxyFast: whatever the fast path decodes, encoding/json
// decodes to the same record.
func FuzzDecodeProxyFast(f *testing.F) {
	for _, e := range proxyCodecRecords() {
		raw, err := json.Marshal(e)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(raw)
	}
	f.Add([]byte(`{"cn":"a\u0062","service":{"namespace":"n","name":"s"}}`))
	f.Add([]byte(`{"cn":"a","service":{"namespace":"n","name":"s"},"serviceAccount":{"namespace":"n","name":"s"},"state":"claimed","serial":"1","issued":"2026-01-01T00:00:00Z","expires":"2026-01-02T00:00:00Z","overlap":null}`))
	f.Fuzz(func(t *testing.T, raw []byte) {
		got, ok := decodeProxyFast(raw)
		if !ok {
			return
		}
		if want := slowDecodeProxy(t, raw); !reflect.DeepEqual(got, want) {
			t.Errorf("fast %+v, encoding/json %+v, of %q", got, want, raw)
		}
	})
}

// encodeProxy writes what json.Marshal writes, for the manager's records
// and for records whose strings JSON must escape.
func TestEncodeProxy(t *testing.T) {
	records := proxyCodecRecords()
	odd := records[2]
	odd.CN, odd.Service.Name = `a"b\c<d>&é`+"\x01\u2028", "\xff"
	far := records[1]
	far.Expires = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC) // json.Marshal refuses it
	for i, e := range append(records, proxyEntry{ProxyRecord: odd.ProxyRecord}, far) {
		checkEncodeProxy(t, e)
		if _, ok := appendProxy(nil, e); ok != (i < 4) {
			t.Errorf("record %d: fast path taken = %v, want %v", i, ok, i < 4)
		}
	}
}

func checkEncodeProxy(t *testing.T, e proxyEntry) {
	t.Helper()
	want, wantErr := json.Marshal(e)
	got, err := encodeProxy(e)
	if (err != nil) != (wantErr != nil) || string(got) != string(want) {
		t.Errorf("encodeProxy(%+v) = %s, %v; json.Marshal: %s, %v", e.ProxyRecord, got, err, want, wantErr)
	}
}

// FuzzEncodeProxy: encodeProxy writes what json.Marshal writes, whatever
// the strings and times.
func FuzzEncodeProxy(f *testing.F) {
	f.Add("9f1c7a52-0b6e-4c8e-9d1a-2f4b5c6d7e8f.svc-00001.bench", "bench", "claimed", "8f3e", int64(1764028210), int64(469171327), true)
	f.Add(`a"b\c<d>&`, "\xff\u2028", "x\x7f", "", int64(-62135596800), int64(0), false)
	f.Fuzz(func(t *testing.T, cn, ns, state, serial string, sec, nsec int64, overlap bool) {
		at := time.Unix(sec, nsec%1e9).UTC()
		e := proxyEntry{ProxyRecord: ProxyRecord{
			CN: cn, Service: mesh.MeshService{Namespace: ns, Name: cn}, ServiceAccount: mesh.ServiceAccount{Namespace: ns, Name: state},
			State: ProxyState(state), Serial: serial, Issued: at, Expires: at.Add(time.Hour), LastSeen: at,
		}}
		if overlap {
			e.Overlap = &OverlapCertificate{Serial: serial, Expires: at}
		}
		checkEncodeProxy(t, e)
		if raw, err := encodeProxy(e); err == nil {
			if got, ok := decodeProxyFast(raw); ok && !reflect.DeepEqual(got, slowDecodeProxy(t, raw)) {
				t.Errorf("fast decode of %s differs from encoding/json's", raw)
			}
		}
	})
}
