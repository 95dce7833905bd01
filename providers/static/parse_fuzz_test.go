package main

import (
	"net/netip"
	"strings"
	"testing"
)

// FuzzParseFile feeds the endpoints-file parser arbitrary files. It must
// not panic, and what it accepts must be what the provider may serve:
// valid service names, valid endpoints, none listed twice. What it refuses
// it must explain naming the file, without Go type names. The seeds are
// the layouts of entryDocs and the committed corpus in
// testdata/fuzz/FuzzParseFile, which `go test` runs every time.
func FuzzParseFile(f *testing.F) {
	for _, doc := range entryDocs {
		f.Add(doc)
	}
	f.Fuzz(func(t *testing.T, data string) {
		const path = "/etc/osm/endpoints.yaml"
		state, err := parseFile(path, []byte(data))
		if err != nil {
			msg := err.Error()
			if !strings.Contains(msg, "endpoints.yaml") {
				t.Errorf("error %q does not name the file", msg)
			}
			if strings.Contains(msg, "main.") {
				t.Errorf("error %q shows a Go type name", msg)
			}
			return
		}
		for svc, eps := range state {
			if err := svc.Validate(); err != nil {
				t.Errorf("accepted an invalid service %q: %v", svc, err)
			}
			seen := map[netip.AddrPort]bool{}
			for _, e := range eps {
				if err := e.Validate(); err != nil {
					t.Errorf("service %s: accepted an invalid endpoint %v: %v", svc, e, err)
				}
				ap := netip.AddrPortFrom(e.IP, e.Port)
				if seen[ap] {
					t.Errorf("service %s: accepted %s twice", svc, ap)
				}
				seen[ap] = true
			}
		}
	})
}
