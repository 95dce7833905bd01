package spechttp

import (
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/spec"
	"github.com/osm-vm/osm-vm/internal/store"
)

const svcHead = "apiVersion: osm-vm.io/v1alpha1\nkind: Service\nmetadata: {name: web, namespace: default}\n"

func discard() *slog.Logger { return slog.New(slog.DiscardHandler) }

func newTestServer(t *testing.T) (*httptest.Server, *spec.Spec) {
	t.Helper()
	s, err := spec.New(t.Context(), discard(), store.NewMemory())
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	srv := httptest.NewServer(NewHandler(discard(), s, Options{}))
	t.Cleanup(srv.Close)
	return srv, s
}

func do(t *testing.T, method, url, contentType, body string) (int, string) {
	t.Helper()
	req, err := http.NewRequestWithContext(t.Context(), method, url, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func bookstoreYAML(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "examples", "bookstore", "mesh.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestHandler(t *testing.T) {
	srv, _ := newTestServer(t)
	u := srv.URL + "/api/v1/spec"

	// Dry run first: nothing stored.
	code, body := do(t, "POST", u+"/apply?dryRun=true", "application/yaml", bookstoreYAML(t))
	if code != http.StatusOK || !strings.Contains(body, `"dryRun": true`) {
		t.Fatalf("dry-run apply: %d %s", code, body)
	}
	if code, body := do(t, "GET", u+"/services", "", ""); code != 200 || !strings.Contains(body, `"items": []`) {
		t.Errorf("services after dry run: %d %s", code, body)
	}

	code, body = do(t, "POST", u+"/apply?source=mesh.yaml", "application/yaml", bookstoreYAML(t))
	if code != http.StatusOK {
		t.Fatalf("apply: %d %s", code, body)
	}
	var res spec.BatchResult
	if err := json.Unmarshal([]byte(body), &res); err != nil {
		t.Fatal(err)
	}
	if got, want := len(res.Results), 12; got != want || res.Results[0].Action != spec.Created {
		t.Errorf("apply results = %d (first %s), want %d created", got, res.Results[0].Action, want)
	}

	tests := []struct {
		name, method, path, contentType, body string
		wantCode                              int
		wantSub                               string
	}{
		{"get service has vip", "GET", "/services/default/bookstore", "", "", 200, `"vip": "127.77.`},
		{"get meshconfig", "GET", "/meshconfigs/mesh", "", "", 200, `"vipRange": "127.77.0.0/16"`},
		{"list policies", "GET", "/policies", "", "", 200, `"kind": "TrafficSplit"`},
		{"list all", "GET", "", "", "", 200, `"kind": "MeshConfig"`},
		{"unknown kind", "GET", "/servics", "", "", 404, `unknown kind \"servics\": want one of all, policies, meshconfigs, services, httproutegroups, tcproutes, traffictargets, trafficsplits, egressgateways, egresses, gateways, referencegrants, httproutes, grpcroutes, tlsroutes, upstreamtrafficsettings, retries, backendtrafficpolicies (did you mean \"services\"?)`},
		{"get missing", "GET", "/services/default/bookstor", "", "", 404, `"error": "Service default/bookstor does not exist (did you mean \"bookstore\"?)"`},
		{"apply invalid lists all errors", "POST", "/apply?source=bad.yaml", "application/yaml",
			svcHead + "spec: {ports: [{port: 0, appProtocol: udp}]}\n", 400,
			`"error": "2 problem(s) in the mesh specification; nothing was changed"`},
		{"apply invalid field text", "POST", "/apply?source=bad.yaml", "application/yaml",
			svcHead + "spec: {ports: [{port: 0}]}\n", 400,
			`"message": "port 0 is out of range: want 1-65535"`},
		{"apply json", "POST", "/apply", "application/json",
			`{"apiVersion":"osm-vm.io/v1alpha1","kind":"Service","metadata":{"name":"api"},"spec":{"ports":[{"port":9000,"appProtocol":"grpc"}]}}`, 200, `"action": "created"`},
		{"apply empty", "POST", "/apply", "application/yaml", "", 400, `no documents in the request body`},
		{"bad dryRun", "POST", "/apply?dryRun=maybe", "application/yaml", "", 400, `query parameter dryRun=\"maybe\": want true or false`},
		{"diff", "POST", "/diff", "application/yaml", strings.Replace(bookstoreYAML(t), "weight: 80", "weight: 50", 1), 200, `-      weight: 80`},
		{"delete conflict", "DELETE", "/services/default/bookstore-v1", "", "", 409, `is used by TrafficSplit default/bookstore-split`},
		{"delete missing", "DELETE", "/services/default/nope", "", "", 404, `Service default/nope does not exist`},
		{"delete one", "DELETE", "/services/default/api", "", "", 200, `"action": "deleted"`},
		{"files body", "POST", "/apply?dryRun=true", spec.FilesMediaType, `{"files":[{"source":"a.yaml","data":"kind: Nope\n"}]}`, 400, `"document": "Nope (unnamed) (a.yaml document 1, line 1)"`},
		{"delete documents", "POST", "/delete", "application/yaml", bookstoreYAML(t), 200, `"action": "deleted"`},
		{"empty after delete", "GET", "", "", "", 200, `"items": []`},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			code, body := do(t, tc.method, u+tc.path, tc.contentType, tc.body)
			if code != tc.wantCode || !strings.Contains(body, tc.wantSub) {
				t.Errorf("%s %s = %d\n%s\nwant %d containing %s", tc.method, tc.path, code, body, tc.wantCode, tc.wantSub)
			}
		})
	}
}

func TestHandlerInvalidBody(t *testing.T) {
	srv, _ := newTestServer(t)
	code, body := do(t, "POST", srv.URL+"/api/v1/spec/apply?source=bad.yaml", "application/yaml",
		svcHead+"spec: {ports: [{port: 0, appProtocol: udp}]}\n")
	if code != http.StatusBadRequest {
		t.Fatalf("code = %d, want 400", code)
	}
	var got meshapi.ErrorBody
	if err := json.Unmarshal([]byte(body), &got); err != nil {
		t.Fatal(err)
	}
	want := meshapi.ErrorBody{
		Reason: "Invalid",
		Error:  "2 problem(s) in the mesh specification; nothing was changed",
		Errors: []meshapi.FieldError{
			{Document: "Service default/web (bad.yaml document 1, line 1)", Field: "spec.ports[0].port", Message: "port 0 is out of range: want 1-65535"},
			{Document: "Service default/web (bad.yaml document 1, line 1)", Field: "spec.ports[0].appProtocol", Message: `unsupported appProtocol "udp": want http, tcp or grpc`},
		},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("error body (-want +got):\n%s", diff)
	}
}
