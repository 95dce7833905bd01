package spec

import (
	"fmt"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseForms(t *testing.T) {
	svc := `{"apiVersion":"osm-vm.io/v1alpha1","kind":"Service","metadata":{"name":"%s"},"spec":{"ports":[{"port":80}]}}`
	tests := []struct {
		name string
		in   string
		want []Key
	}{
		{"json object", `{"apiVersion":"osm-vm.io/v1alpha1","kind":"Service","metadata":{"name":"a"},"spec":{"ports":[{"port":80}]}}`,
			[]Key{{Kind: KindService, Namespace: "default", Name: "a"}}},
		{"json array", "[" + fmt.Sprintf(svc, "a") + "," + fmt.Sprintf(svc, "b") + "]",
			[]Key{{Kind: KindService, Namespace: "default", Name: "a"}, {Kind: KindService, Namespace: "default", Name: "b"}}},
		{"kubernetes list", `{"apiVersion":"v1","kind":"List","items":[` + fmt.Sprintf(svc, "a") + `]}`,
			[]Key{{Kind: KindService, Namespace: "default", Name: "a"}}},
		{"empty documents skipped", "---\n---\n" + svcHead + "spec: {ports: [{port: 80}]}\n---\n",
			[]Key{{Kind: KindService, Namespace: "default", Name: "web"}}},
		{"status ignored", svcHead + "spec: {ports: [{port: 80}]}\nstatus: {vip: 10.0.0.1}\n",
			[]Key{{Kind: KindService, Namespace: "default", Name: "web"}}},
		{"empty input", "", nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			docs, err := Parse([]byte(tc.in), "in")
			if err != nil {
				t.Fatalf("Parse: %v", err)
			}
			var got []Key
			for _, d := range docs {
				got = append(got, d.Key())
				if s, ok := d.Object.(*Service); ok && s.Status != nil {
					t.Errorf("%s: status kept on apply: %+v", d.Key(), s.Status)
				}
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("keys (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDefaults(t *testing.T) {
	docs, err := Parse([]byte(svcHead+"spec: {ports: [{port: 80}]}\n"), "")
	if err != nil {
		t.Fatal(err)
	}
	got := docs[0].Object.(*Service).Spec
	want := ServiceSpec{ServiceAccount: "web", Ports: []ServicePort{{Port: 80, TargetPort: 80, AppProtocol: "http"}}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("defaults (-want +got):\n%s", diff)
	}
}
