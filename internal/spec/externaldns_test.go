package spec

import (
	"slices"
	"strings"
	"testing"

	"github.com/osm-vm/osm-vm/internal/mesh"
)

func TestExternalDNSNameAnnotation(t *testing.T) {
	docs, err := Parse([]byte(`apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata:
  name: shop
  annotations: {osm-vm.io/external-dns-name: "shop.example.com, www.shop.example.com"}
spec: {ports: [{port: 8080}]}
`), "shop.yaml")
	if err != nil {
		t.Fatal(err)
	}
	snap := newSnapshot(&state{objects: map[Key]Object{docs[0].Key(): docs[0].Object}}, 1)
	got := snap.ExternalDNSNames()[mesh.MeshService{Namespace: "default", Name: "shop"}]
	if want := []string{"shop.example.com", "www.shop.example.com"}; !slices.Equal(got, want) {
		t.Errorf("ExternalDNSNames = %q, want %q", got, want)
	}
	for value, want := range map[string]string{
		"":                   "empty: give one or more host names",
		"Shop.example.com":   "upper-case",
		"shop":               "not fully qualified",
		"shop.example.com.":  "ends in a dot",
		"*.example.com":      "wildcard",
		"bad_name.example.c": "not a DNS-1123 label",
		"web.default.mesh":   "under .mesh",
	} {
		_, err := Parse([]byte(`apiVersion: osm-vm.io/v1alpha1
kind: Service
metadata: {name: shop, annotations: {osm-vm.io/external-dns-name: "`+value+`"}}
spec: {ports: [{port: 8080}]}
`), "shop.yaml")
		if err == nil || !strings.Contains(err.Error(), want) || !strings.Contains(err.Error(), "metadata.annotations.osm-vm.io/external-dns-name") {
			t.Errorf("annotation %q: error %v, want it to name the annotation and say %q", value, err, want)
		}
	}
}
