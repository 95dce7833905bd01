package mesh

import (
	"regexp"
	"testing"

	"github.com/google/uuid"
)

func TestProxyIdentityRoundTrip(t *testing.T) {
	id := ProxyIdentity{UUID: uuid.MustParse("2f1d4c1e-6b0a-4f5e-9d1c-0a1b2c3d4e5f"), Service: MeshService{Namespace: "default", Name: "bookstore"}}
	cn := id.CommonName()
	if want := "2f1d4c1e-6b0a-4f5e-9d1c-0a1b2c3d4e5f.bookstore.default"; cn != want {
		t.Fatalf("CommonName() = %q, want %q", cn, want)
	}
	got, err := ParseProxyIdentity(cn)
	if err != nil {
		t.Fatalf("ParseProxyIdentity(%q): %v", cn, err)
	}
	if got != id {
		t.Errorf("ParseProxyIdentity(%q) = %v, want %v", cn, got, id)
	}
}

func TestParseProxyIdentityErrors(t *testing.T) {
	for name, cn := range map[string]string{
		"too few parts":     "2f1d4c1e-6b0a-4f5e-9d1c-0a1b2c3d4e5f.bookstore",
		"too many parts":    "2f1d4c1e-6b0a-4f5e-9d1c-0a1b2c3d4e5f.bookstore.default.x",
		"not a uuid":        "proxy.bookstore.default",
		"compact uuid":      "2f1d4c1e6b0a4f5e9d1c0a1b2c3d4e5f.bookstore.default",
		"upper-case name":   "2f1d4c1e-6b0a-4f5e-9d1c-0a1b2c3d4e5f.BookStore.default",
		"empty namespace":   "2f1d4c1e-6b0a-4f5e-9d1c-0a1b2c3d4e5f.bookstore.",
		"dash-leading name": "2f1d4c1e-6b0a-4f5e-9d1c-0a1b2c3d4e5f.-bookstore.default",
	} {
		t.Run(name, func(t *testing.T) {
			if _, err := ParseProxyIdentity(cn); err == nil {
				t.Errorf("ParseProxyIdentity(%q) succeeded; want an error", cn)
			}
		})
	}
}

func TestSPIFFEID(t *testing.T) {
	got := ServiceAccount{Namespace: "default", Name: "bookstore"}.SPIFFEID("osm.local")
	if want := "spiffe://osm.local/ns/default/sa/bookstore"; got != want {
		t.Errorf("SPIFFEID = %q, want %q", got, want)
	}
}

// TestIsDNS1123Label: isDNS1123Label agrees with the regular expression
// of a DNS-1123 label on every string of up to three characters from an
// alphabet of its classes' edges, and on some longer ones.
func TestIsDNS1123Label(t *testing.T) {
	re := regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	alphabet := []string{"a", "z", "0", "9", "-", "A", "Z", ".", "_", "/", "é", "`", "{", ":"}
	texts := []string{"", "svc-00001", "bookstore-v2", "-a", "a-", "a--b", "a.b"}
	for _, a := range alphabet {
		texts = append(texts, a)
		for _, b := range alphabet {
			texts = append(texts, a+b)
			for _, c := range alphabet {
				texts = append(texts, a+b+c)
			}
		}
	}
	for _, s := range texts {
		if got, want := isDNS1123Label(s), re.MatchString(s); got != want {
			t.Errorf("isDNS1123Label(%q) = %v, the regular expression says %v", s, got, want)
		}
	}
}
