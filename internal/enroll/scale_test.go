package enroll

import (
	"context"
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
)

// TestEnrollScaleSetOneToken boots a scale set: 200 machines enroll at
// once over HTTPS with one 200-use token on a real bbolt store. Every one
// succeeds (store contention is the server's business, never the
// client's), the token ends with no use left, and a 201st is refused as
// used up.
func TestEnrollScaleSetOneToken(t *testing.T) {
	if testing.Short() {
		t.Skip("200 enrollments over HTTPS with fsync'd commits")
	}
	const n = 200
	e := newBoltTestEnv(t)
	secret, _ := e.token(t, TokenRequest{Service: bookstore, Uses: n})

	errs := e.enrollAtOnce(t, secret, n)

	outcomes := map[string]int{}
	for _, err := range errs {
		var apiErr *meshclient.APIError
		switch {
		case err == nil:
			outcomes["ok"]++
		case errors.As(err, &apiErr):
			outcomes[apiErr.Body.Reason]++
		default:
			outcomes[err.Error()]++
		}
	}
	if diff := cmp.Diff(map[string]int{"ok": n}, outcomes); diff != "" {
		t.Errorf("outcomes of %d concurrent enrollments (-want +got):\n%s", n, diff)
	}
	if got, want := e.storedToken(t, secret).UsesLeft, 0; got != want {
		t.Errorf("token uses left = %d, want %d", got, want)
	}
	if got, want := e.proxies(t), n; got != want {
		t.Errorf("proxy records = %d, want %d", got, want)
	}

	_, err := meshclient.Enroll(context.Background(), nil, e.join(secret), newKey(t))
	var apiErr *meshclient.APIError
	if !errors.As(err, &apiErr) || apiErr.Body.Reason != meshapi.ReasonTokenUsedUp {
		t.Errorf("enrollment %d = %v, want refused with %s", n+1, err, meshapi.ReasonTokenUsedUp)
	}
}
