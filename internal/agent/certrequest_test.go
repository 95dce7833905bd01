package agent

import (
	"context"
	"crypto"
	"errors"
	"testing"

	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// TestCertRequestKeepsKey: a request asks with the same key every time
// (the retry of a renewal whose answer was lost), a new request with
// another.
func TestCertRequestKeepsKey(t *testing.T) {
	lost := errors.New("answer lost")
	var keys []crypto.Signer
	ask := func(_ context.Context, key crypto.Signer) (meshclient.Result, error) {
		keys = append(keys, key)
		return meshclient.Result{}, lost
	}
	req := &CertRequest{Dir: t.TempDir()}
	for range 2 {
		if _, _, err := req.Obtain(t.Context(), nil, ask); !errors.Is(err, lost) {
			t.Fatalf("Obtain = %v, want %v", err, lost)
		}
	}
	if _, _, err := (&CertRequest{Dir: t.TempDir()}).Obtain(t.Context(), nil, ask); !errors.Is(err, lost) {
		t.Fatalf("Obtain = %v, want %v", err, lost)
	}
	if keys[0] != keys[1] {
		t.Errorf("the retry asked with another key; want the same")
	}
	if keys[0] == keys[2] {
		t.Errorf("a new request asked with the first request's key; want a new one")
	}
}
