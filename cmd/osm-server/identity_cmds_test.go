package main

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
)

// `proxy list` shows every certificate a proxy may still present: the
// current one and the overlap one.
func TestProxyListShowsEveryValidCertificate(t *testing.T) {
	at := func(h int) time.Time { return time.Date(2026, 3, 1, h, 0, 0, 0, time.UTC) }
	recs := []meshapi.Proxy{
		{
			CN: "a.bookstore.default", Service: mesh.MeshService{Namespace: "default", Name: "bookstore"}, State: "claimed",
			Serial: "c0ffee", Issued: at(10), Expires: at(20), LastSeen: at(11),
			Overlap: &meshapi.OverlapCertificate{Serial: "beef", Expires: at(15)},
		},
		{
			CN: "b.bookstore.default", Service: mesh.MeshService{Namespace: "default", Name: "bookstore"}, State: "unclaimed",
			Serial: "f00d", Issued: at(10), Expires: at(20),
		},
	}
	var out strings.Builder
	if err := printList(&out, "table", recs, proxyHeader, proxyRow); err != nil {
		t.Fatal(err)
	}
	var got [][]string
	for line := range strings.Lines(out.String()) {
		got = append(got, strings.Fields(line))
	}
	want := [][]string{
		{"CN", "SERVICE", "STATE", "SERIAL", "ISSUED", "EXPIRES", "OVERLAP", "(SERIAL", "UNTIL)", "LAST", "SEEN"},
		{"a.bookstore.default", "default/bookstore", "claimed", "c0ffee", "2026-03-01T10:00:00Z", "2026-03-01T20:00:00Z", "beef", "until", "2026-03-01T15:00:00Z", "2026-03-01T11:00:00Z"},
		{"b.bookstore.default", "default/bookstore", "unclaimed", "f00d", "2026-03-01T10:00:00Z", "2026-03-01T20:00:00Z", "-", "never"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("proxy list (-want +got):\n%s", diff)
	}
}
