package main

import (
	"fmt"
	"maps"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/provider"
)

// entryDocs are layouts the entry cache must either cut exactly or leave
// to parseFile; FuzzEntryCache starts from them.
var entryDocs = map[string]string{
	"indented items":                    "services:\n  - name: a\n    namespace: d\n    endpoints:\n      - {ip: 10.0.0.1, port: 80}\n  - {name: b, namespace: d}\n",
	"compact items":                     "# endpoints\nservices:\n- name: a\n  namespace: d\n  endpoints:\n  - {ip: 10.0.0.1, port: 80}\n\n# b next\n- name: b\n  namespace: d\n",
	"crlf":                              "services:\r\n  - name: a\r\n    namespace: d\r\n  - name: b\r\n    namespace: d\r\n",
	"block scalar with item-like lines": "services:\n  - name: a\n    namespace: d\n    endpoints:\n      - ip: 10.0.0.1\n        port: 80\n        labels:\n          note: |\n            one\n            - not an item\n# a comment\n  - name: b\n    namespace: d\n",
	"anchor used by a later entry":      "services:\n  - name: a\n    namespace: d\n    endpoints:\n      - {ip: 10.0.0.1, port: 80, labels: &l {v: x}}\n  - name: b\n    namespace: d\n    endpoints:\n      - {ip: 10.0.0.2, port: 80, labels: *l}\n",
	"quoted scalar across an item line": "services:\n  - name: a\n    namespace: d\n    endpoints:\n      - {ip: 10.0.0.1, port: 80, labels: {note: \"x\n  - y\"}}\n  - name: b\n    namespace: d\n",
	"flow mapping across an item line":  "services:\n  - {name: a, namespace: d,\n  - endpoints: []}\n",
	"second document":                   "services:\n  - {name: a, namespace: d}\n---\nservices:\n  - {name: b, namespace: d}\n",
	"key after the list":                "services:\n  - {name: a, namespace: d}\nextra: 1\n",
	"services twice":                    "services:\n  - {name: a, namespace: d}\nservices:\n  - {name: b, namespace: d}\n",
	"items at two indentations":         "services:\n  - {name: a, namespace: d}\n - {name: b, namespace: d}\n",
	"duplicate service":                 "services:\n  - {name: a, namespace: d}\n  - {name: a, namespace: d}\n",
	"bad endpoint in second entry":      "services:\n  - {name: a, namespace: d}\n  - name: b\n    namespace: d\n    endpoints:\n      - {ip: 10.0.0.300, port: 80}\n",
	"empty item":                        "services:\n  -\n  - {name: b, namespace: d}\n",
	"flow sequence":                     "services: [{name: a, namespace: d}]\n",
	"empty":                             "",
	"tab indentation":                   "services:\n\t- {name: a, namespace: d}\n",
}

func TestSplitEntries(t *testing.T) {
	for _, tc := range []struct {
		name string
		want []string // nil: not cut
	}{
		{"indented items", []string{"  - name: a\n    namespace: d\n    endpoints:\n      - {ip: 10.0.0.1, port: 80}\n", "  - {name: b, namespace: d}\n"}},
		{"compact items", []string{"- name: a\n  namespace: d\n  endpoints:\n  - {ip: 10.0.0.1, port: 80}\n\n# b next\n", "- name: b\n  namespace: d\n"}},
		{"block scalar with item-like lines", []string{
			"  - name: a\n    namespace: d\n    endpoints:\n      - ip: 10.0.0.1\n        port: 80\n        labels:\n          note: |\n            one\n            - not an item\n# a comment\n",
			"  - name: b\n    namespace: d\n"}},
		{"second document", nil},
		{"key after the list", nil},
		{"services twice", nil},
		{"items at two indentations", nil},
		{"flow sequence", nil},
		{"empty", nil},
		{"tab indentation", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			entries, ok := splitEntries([]byte(entryDocs[tc.name]))
			var got []string
			for _, e := range entries {
				got = append(got, string(e))
			}
			if ok != (tc.want != nil) {
				t.Fatalf("splitEntries ok = %t, want %t (entries %q)", ok, tc.want != nil, got)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("entries (-want +got):\n%s", diff)
			}
		})
	}
}

// checkSameAsParseFile fails unless the entry cache's answer for data is
// exactly parseFile's: the same state, or the same error message.
func checkSameAsParseFile(t *testing.T, c *entryCache, data []byte) {
	t.Helper()
	want, wantErr := parseFile("/etc/osm/endpoints.yaml", data)
	got, gotErr := c.parse("/etc/osm/endpoints.yaml", data)
	if fmt.Sprint(gotErr) != fmt.Sprint(wantErr) {
		t.Fatalf("error = %v, want parseFile's %v", gotErr, wantErr)
	}
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b provider.Endpoint) bool {
		return a.IP == b.IP && a.Port == b.Port && maps.Equal(a.Labels, b.Labels)
	})); diff != "" {
		t.Fatalf("state differs from parseFile's (-want +got):\n%s", diff)
	}
}

func TestEntryCacheMatchesParseFile(t *testing.T) {
	for name, doc := range entryDocs {
		t.Run(name, func(t *testing.T) {
			c := &entryCache{}
			checkSameAsParseFile(t, c, []byte(doc))
			checkSameAsParseFile(t, c, []byte(doc)) // from the cache this time
		})
	}
}

func TestEntryCacheParsesOnlyChangedEntries(t *testing.T) {
	file := func(port int) []byte {
		var sb strings.Builder
		sb.WriteString("services:\n")
		for s := range 50 {
			p := 80
			if s == 7 {
				p = port
			}
			fmt.Fprintf(&sb, "  - name: svc-%d\n    namespace: d\n    endpoints:\n      - {ip: 10.0.%d.1, port: %d}\n", s, s, p)
		}
		return []byte(sb.String())
	}
	c := &entryCache{}
	for i, tc := range []struct {
		data  []byte
		want  int
		whole bool
	}{
		{file(80), 50, false},
		{file(81), 1, false},
		{file(81), 0, false},
		{append(file(81), "  - name: svc-7\n    namespace: d\n"...), 0, true}, // listed twice: parsed whole, for the error
		{file(82), 50, false}, // the cache went with the bad file
		{file(80), 1, false},
	} {
		checkSameAsParseFile(t, c, tc.data)
		if c.parsed != tc.want || c.whole != tc.whole {
			t.Errorf("edit %d: parsed %d entries (whole file: %t), want %d (%t)", i, c.parsed, c.whole, tc.want, tc.whole)
		}
	}
}

func TestEntryCacheEditsKeepMatchingParseFile(t *testing.T) {
	// Edits that move an entry's text across the cut (a comment turning
	// into a key, an entry splitting in two) must never leave a stale
	// parse behind.
	c := &entryCache{}
	for _, doc := range []string{
		entryDocs["indented items"],
		strings.Replace(entryDocs["indented items"], "  - {name: b", "  # - {name: b", 1),
		strings.Replace(entryDocs["indented items"], "port: 80", "port: 80, labels: {v: \"1\"}", 1),
		entryDocs["anchor used by a later entry"],
		strings.Replace(entryDocs["anchor used by a later entry"], "&l {v: x}", "{v: x}", 1),
		entryDocs["indented items"],
	} {
		checkSameAsParseFile(t, c, []byte(doc))
	}
}

// FuzzEntryCache checks the one property the cache rests on: for any
// file, and any file before it, its answer is parseFile's.
func FuzzEntryCache(f *testing.F) {
	for _, doc := range entryDocs {
		f.Add(entryDocs["indented items"], doc)
	}
	f.Fuzz(func(t *testing.T, before, after string) {
		c := &entryCache{}
		_, _ = c.parse("endpoints.yaml", []byte(before))
		checkSameAsParseFile(t, c, []byte(after))
	})
}
