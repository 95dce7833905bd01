package spechttp

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/spec/spectest"
)

// listBomb is a List of Services that each stay under the document limit
// but that together expand far beyond the request's.
func listBomb(items int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "apiVersion: v1\nkind: List\nbig: &big %q\nitems:\n", strings.Repeat("z", 200<<10))
	for i := range items {
		fmt.Fprintf(&b, "- {apiVersion: osm-vm.io/v1alpha1, kind: Service, metadata: {name: s%d, annotations: {a: *big}}, spec: {ports: [{port: 80}]}}\n", i)
	}
	return b.String()
}

// TestApplyRefusesAliasBombs: documents whose YAML aliases expand beyond
// the limits are refused before they are decoded, by apply, dry run and
// diff alike, and nothing is stored.
func TestApplyRefusesAliasBombs(t *testing.T) {
	tests := []struct {
		name, body string
		want       meshapi.FieldError
	}{
		{"large scalar repeated", spectest.AliasBomb(64<<10, 200), meshapi.FieldError{
			Document: "Service default/web (bomb.yaml document 1, line 1)",
			Message:  "more than 256 KiB with YAML aliases expanded, over the limit of 256 KiB per document: split it into smaller documents",
		}},
		{"nested aliases", spectest.NestedBomb(4, 4<<10), meshapi.FieldError{
			Document: "HTTPRouteGroup default/r (bomb.yaml document 1, line 1)",
			Message:  "more than 256 KiB with YAML aliases expanded, over the limit of 256 KiB per document: split it into smaller documents",
		}},
		{"many documents", listBomb(30), meshapi.FieldError{
			Document: "Service default/s20 (bomb.yaml document 1, line 25)",
			Message:  "the documents of this request add up to more than 4 MiB with YAML aliases expanded, over the limit of 4 MiB per request: split the batch",
		}},
		{"alias of itself", svcHead + "spec: &s {ports: [{port: 80}], x: *s}\n", meshapi.FieldError{
			Document: "Service default/web (bomb.yaml document 1, line 1)",
			Message:  "a YAML alias (line 4) refers to a node that contains it: remove the alias",
		}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			srv, s := newTestServer(t)
			for _, path := range []string{"/apply?source=bomb.yaml", "/apply?dryRun=true&source=bomb.yaml", "/diff?source=bomb.yaml"} {
				code, body := do(t, "POST", srv.URL+"/api/v1/spec"+path, "application/yaml", tc.body)
				if code != http.StatusBadRequest {
					t.Fatalf("POST %s = %d, want 400; body (first 300 bytes): %.300s", path, code, body)
				}
				var got meshapi.ErrorBody
				if err := json.Unmarshal([]byte(body), &got); err != nil {
					t.Fatal(err)
				}
				if diff := cmp.Diff(got.Errors, []meshapi.FieldError{tc.want}); diff != "" {
					t.Errorf("POST %s errors (-got +want):\n%s", path, diff)
				}
			}
			if v := s.Snapshot().Version(); v != 0 {
				t.Errorf("specification version %d after refused applies, want 0", v)
			}
		})
	}
}

// TestRequestBodyIsBounded: a body over spec.MaxRequestBytes is refused with 413
// before it is parsed.
func TestRequestBodyIsBounded(t *testing.T) {
	srv, _ := newTestServer(t)
	body := "# " + strings.Repeat("x", spec.MaxRequestBytes) + "\n"
	code, got := do(t, "POST", srv.URL+"/api/v1/spec/apply?dryRun=true", "application/yaml", body)
	if want := fmt.Sprintf("request body is larger than %d bytes: split the batch", spec.MaxRequestBytes); code != http.StatusRequestEntityTooLarge || !strings.Contains(got, want) {
		t.Errorf("POST of %d bytes = %d %s, want 413 containing %q", len(body), code, got, want)
	}
}
