package fakearm

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestReadFixture(t *testing.T) {
	cases := []struct {
		name    string
		json    string
		want    Fixture
		wantErr string
	}{
		{
			// The example in docs/plugins/azure.md.
			name: "docs example",
			json: `{
  "scaleSets": [
    {"resourceGroup": "rg-a", "name": "bookstore", "mode": "Uniform",
     "tags": {"osm-service": "bookstore.default", "osm-port": "8080"},
     "instances": [{"name": "0", "privateIP": "10.1.0.4"},
                   {"name": "1", "privateIP": "10.1.0.5", "powerState": "deallocated"}]}
  ],
  "virtualMachines": [
    {"resourceGroup": "rg-a", "name": "legacy-db", "privateIP": "10.1.2.4",
     "tags": {"osm-service": "db.default", "osm-port": "5432"}}
  ]
}`,
			want: Fixture{
				ScaleSets: []ScaleSet{{ResourceGroup: "rg-a", Name: "bookstore", Mode: "Uniform",
					Tags:      map[string]string{"osm-service": "bookstore.default", "osm-port": "8080"},
					Instances: []Instance{{Name: "0", PrivateIP: "10.1.0.4"}, {Name: "1", PrivateIP: "10.1.0.5", PowerState: "deallocated"}}}},
				VirtualMachines: []VirtualMachine{{ResourceGroup: "rg-a", Tags: map[string]string{"osm-service": "db.default", "osm-port": "5432"},
					Instance: Instance{Name: "legacy-db", PrivateIP: "10.1.2.4"}}},
			},
		},
		{name: "failures", json: `{"credentialError": "boom", "armError": {"status": 429, "code": "TooManyRequests"}}`,
			want: Fixture{CredentialError: "boom", ARMError: &ARMError{Status: 429, Code: "TooManyRequests"}}},
		{name: "unknown key", json: `{"scaleSet": []}`, wantErr: `unknown field "scaleSet"`},
		{name: "not JSON", json: `scaleSets: []`, wantErr: "invalid character"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "fixture.json")
			if err := os.WriteFile(path, []byte(tc.json), 0o600); err != nil {
				t.Fatal(err)
			}
			got, err := ReadFixture(path)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("ReadFixture error %v; want one containing %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("ReadFixture: %v", err)
			}
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("fixture (-want +got):\n%s", diff)
			}
		})
	}
}
