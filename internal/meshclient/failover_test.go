package meshclient_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/testaddr"
)

// replica is a real HTTPS server answering the agent config with status
// (200: an agent config naming itself), counting its requests.
type replica struct {
	url  string
	hits atomic.Int32
}

func startReplica(t *testing.T, status int) *replica {
	t.Helper()
	r := &replica{}
	r.url = pki.startServer(t, http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		r.hits.Add(1)
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(status)
		if status == http.StatusOK {
			_, _ = w.Write([]byte(`{"identity":"` + r.url + `"}`))
			return
		}
		_, _ = w.Write([]byte(`{"error":"refused by ` + http.StatusText(status) + `"}`))
	}), false)
	return r
}

var pki *testPKI

// deadServer returns the URL of a port nothing listens on (connection refused).
func deadServer(t *testing.T) string {
	t.Helper()
	// Below the ephemeral range (testaddr): a port another test's server
	// bound on port 0 meanwhile would answer.
	return "https://" + testaddr.Free(t)
}

// hangUpServer accepts connections and closes them at once.
func hangUpServer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	go func() {
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	return "https://" + l.Addr().String()
}

func fetch(ctx context.Context, server string) (meshapi.AgentConfig, error) {
	return meshclient.FetchAgentConfig(ctx, server, pki.caPEM, pki.client)
}

// TestFailover: the agent's calls move to the next replica only when one
// gives no answer (refused, hung up, 5xx), never past a 4xx, and when none
// answers the error names each replica tried.
func TestFailover(t *testing.T) {
	pki = newTestPKI(t)
	ok, unavailable, forbidden := startReplica(t, http.StatusOK), startReplica(t, http.StatusServiceUnavailable), startReplica(t, http.StatusForbidden)
	dead, hangUp := deadServer(t), hangUpServer(t)

	t.Run("past dead, hung up and 503 to an answer", func(t *testing.T) {
		ac, by, err := meshclient.Failover(t.Context(), []string{dead, hangUp, unavailable.url, ok.url}, fetch)
		if err != nil {
			t.Fatal(err)
		}
		if by != ok.url || ac.Identity != ok.url {
			t.Errorf("answered by %s (%q), want %s", by, ac.Identity, ok.url)
		}
	})
	t.Run("a 4xx stops", func(t *testing.T) {
		before := ok.hits.Load()
		_, by, err := meshclient.Failover(t.Context(), []string{dead, forbidden.url, ok.url}, fetch)
		if err == nil || !strings.Contains(err.Error(), "refused by Forbidden") || by != forbidden.url {
			t.Errorf("got %v from %s, want the 403 of %s", err, by, forbidden.url)
		}
		if meshclient.Unreachable(err) {
			t.Errorf("a 403 counts as unreachable: %v", err)
		}
		if ok.hits.Load() != before {
			t.Error("a replica after the one that refused was asked")
		}
	})
	t.Run("none answers", func(t *testing.T) {
		_, _, err := meshclient.Failover(t.Context(), []string{dead, hangUp, unavailable.url}, fetch)
		if err == nil {
			t.Fatal("no error")
		}
		for _, s := range []string{dead, hangUp, unavailable.url, "tried 3", "connection refused"} {
			if !strings.Contains(err.Error(), s) {
				t.Errorf("error does not name %q: %v", s, err)
			}
		}
		if !meshclient.Unreachable(err) {
			t.Errorf("Unreachable(%v) = false", err)
		}
	})
	t.Run("no servers", func(t *testing.T) {
		if _, _, err := meshclient.Failover(t.Context(), nil, fetch); err == nil {
			t.Error("no error without servers")
		}
	})
	t.Run("canceled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(t.Context())
		cancel()
		_, _, err := meshclient.Failover(ctx, []string{ok.url, dead}, fetch)
		if !errors.Is(err, context.Canceled) {
			t.Errorf("got %v, want context.Canceled", err)
		}
	})
}
