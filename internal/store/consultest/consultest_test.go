//go:build consulintegration

package consultest

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestCluster starts three servers on loopback and checks that a write
// through one is read through another: one Raft cluster, not three.
func TestCluster(t *testing.T) {
	agents := StartCluster(t, 3)
	req, err := http.NewRequestWithContext(t.Context(), http.MethodPut, "http://"+agents[0].HTTPAddr+"/v1/kv/consultest/k", strings.NewReader("v"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	// ?consistent: the read goes through the leader with a quorum check.
	resp, err = http.Get("http://" + agents[2].HTTPAddr + "/v1/kv/consultest/k?raw&consistent")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	got, _ := io.ReadAll(resp.Body)
	if string(got) != "v" {
		t.Fatalf("%s reads %q (%s); want the v written through %s", agents[2].Name, got, resp.Status, agents[0].Name)
	}
}
