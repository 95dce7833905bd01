package enroll

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"

	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/meshapi"
	"github.com/osm-vm/osm-vm/internal/meshclient"
	"github.com/osm-vm/osm-vm/internal/store"
)

func TestTokensCreate(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	st := store.NewMemory()
	tokens := NewTokens(st, func() time.Time { return now })
	ctx := context.Background()

	for _, tc := range []struct {
		name string
		req  TokenRequest
		want Token
	}{
		{
			name: "defaults",
			req:  TokenRequest{Service: bookstore},
			want: Token{Service: bookstore, ServiceAccount: "bookstore", Created: now, Expires: now.Add(24 * time.Hour), UsesTotal: 1, UsesLeft: 1},
		},
		{
			name: "everything given",
			req:  TokenRequest{Service: bookstore, ServiceAccount: "books", TTL: time.Hour, Uses: 10},
			want: Token{Service: bookstore, ServiceAccount: "books", Created: now, Expires: now.Add(time.Hour), UsesTotal: 10, UsesLeft: 10},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			secret, tok, err := tokens.Create(ctx, tc.req)
			if err != nil {
				t.Fatal(err)
			}
			if len(secret) != 64 || !validSecret(secret) {
				t.Errorf("secret %q: want 64 lower-case hex characters (256 bits)", secret)
			}
			sum := sha256.Sum256([]byte(secret))
			hash := hex.EncodeToString(sum[:])
			tc.want.ID = hash[:8]
			if diff := cmp.Diff(tc.want, tok); diff != "" {
				t.Errorf("token (-want +got):\n%s", diff)
			}
			val, version, err := st.Get(ctx, TokenPrefix+hash)
			if err != nil || version == 0 {
				t.Fatalf("token not stored under its hash: %v", err)
			}
			if strings.Contains(string(val), secret) {
				t.Errorf("stored token %s contains the secret", val)
			}
		})
	}

	// The secret is nowhere in the store, only its hash.
	kvs, err := st.List(ctx, "")
	if err != nil {
		t.Fatal(err)
	}
	if got, want := len(kvs), 2; got != want {
		t.Errorf("store keys = %d, want %d", got, want)
	}
}

func TestTokensCreateInvalid(t *testing.T) {
	tokens := NewTokens(store.NewMemory(), nil)
	for _, tc := range []struct {
		name string
		req  TokenRequest
		want string
	}{
		{"no service", TokenRequest{}, "namespace is empty"},
		{"bad service name", TokenRequest{Service: mesh.MeshService{Namespace: "default", Name: "Book_Store"}}, "not a DNS-1123 label"},
		{"bad service account", TokenRequest{Service: bookstore, ServiceAccount: "a/b"}, "service account"},
		{"negative ttl", TokenRequest{Service: bookstore, TTL: -time.Hour}, "ttl -1h0m0s is negative"},
		{"negative uses", TokenRequest{Service: bookstore, Uses: -1}, "uses -1 is negative"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := tokens.Create(context.Background(), tc.req)
			if !errors.Is(err, ErrTokenInvalid) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Create = %v, want ErrTokenInvalid saying %q", err, tc.want)
			}
		})
	}
}

func TestTokenState(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	valid := Token{Expires: now.Add(time.Minute), UsesLeft: 1}
	for _, tc := range []struct {
		name string
		tok  func(Token) Token
		want string
	}{
		{"valid", func(t Token) Token { return t }, StateValid},
		{"expires now", func(t Token) Token { t.Expires = now; return t }, StateExpired},
		{"used up", func(t Token) Token { t.UsesLeft = 0; return t }, StateUsedUp},
		{"revoked and expired", func(t Token) Token { t.Revoked = true; t.Expires = now.Add(-time.Hour); return t }, StateRevoked},
	} {
		if got := tc.tok(valid).State(now); got != tc.want {
			t.Errorf("%s: State = %q, want %q", tc.name, got, tc.want)
		}
	}
}

func TestTokenAdminAPI(t *testing.T) {
	e := newTestEnv(t)
	ctx := context.Background()
	c := meshclient.NewAdmin(e.srv.URL, e.client(), "admin-token")

	ct, err := c.CreateToken(ctx, meshapi.CreateTokenRequest{Service: bookstore, TTL: (2 * time.Hour).String(), Uses: 2})
	if err != nil {
		t.Fatal(err)
	}
	secret, created := ct.Secret, ct.Token
	if got, want := created.Expires.Sub(created.Created), 2*time.Hour; got != want {
		t.Errorf("token lifetime = %s, want %s", got, want)
	}
	// The secret the API returned works.
	if _, err := meshclient.Enroll(ctx, nil, e.join(secret), newKey(t)); err != nil {
		t.Fatalf("Enroll with the created token: %v", err)
	}
	ct, err = c.CreateToken(ctx, meshapi.CreateTokenRequest{Service: mesh.MeshService{Namespace: "default", Name: "bookbuyer"}})
	if err != nil {
		t.Fatal(err)
	}
	other := ct.Token

	revoked, err := c.RevokeToken(ctx, other.ID)
	if err != nil {
		t.Fatal(err)
	}
	if !revoked.Revoked || revoked.RevokedAt == nil {
		t.Errorf("Revoke returned %+v, want it revoked with a time", revoked)
	}
	if _, err := c.RevokeToken(ctx, other.ID); err != nil {
		t.Errorf("revoking twice: %v, want no error", err)
	}

	list, err := c.ListTokens(ctx)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, ts := range list {
		got[ts.ID] = ts.State + " " + ts.Service.String()
	}
	want := map[string]string{created.ID: "valid default/bookstore", other.ID: "revoked default/bookbuyer"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("listed tokens (-want +got):\n%s", diff)
	}
	for _, ts := range list {
		if ts.ID == created.ID && ts.UsesLeft != 1 {
			t.Errorf("token %s uses left = %d, want 1", ts.ID, ts.UsesLeft)
		}
	}

	if _, err := c.RevokeToken(ctx, "deadbeef"); !errors.Is(err, meshclient.ErrNotFound) {
		t.Errorf("Revoke of an unknown ID = %v, want meshclient.ErrNotFound", err)
	}
	for _, tc := range []struct {
		name string
		body any
		want string
	}{
		{"bad ttl", map[string]any{"service": bookstore, "ttl": "tomorrow"}, `ttl "tomorrow"`},
		{"zero ttl", map[string]any{"service": bookstore, "ttl": "0s"}, "positive duration"},
		{"bad service", map[string]any{"service": map[string]string{"name": "x"}}, "namespace is empty"},
		{"unknown field", map[string]any{"service": bookstore, "usez": 3}, `unknown field "usez"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			status, body := e.postJSON(t, e.client(), "/api/v1/tokens", tc.body, &meshapi.CreatedToken{})
			if status != http.StatusBadRequest || !strings.Contains(body.Error, tc.want) {
				t.Errorf("POST /api/v1/tokens = %d %q, want 400 saying %q", status, body.Error, tc.want)
			}
		})
	}
}

func TestJoinCommand(t *testing.T) {
	got := meshapi.JoinCommand("https://10.0.0.1:15443", "abc", "sha256:00", bookstore)
	want := "osm-agent enroll --server https://10.0.0.1:15443 --token abc --ca-cert-hash sha256:00 --service bookstore --namespace default"
	if got != want {
		t.Errorf("meshapi.JoinCommand = %q, want %q", got, want)
	}
}

// listCounter is a Store that counts the keys its List calls return.
type listCounter struct {
	Store
	read int
}

func (l *listCounter) List(ctx context.Context, prefix string) ([]store.KV, error) {
	kvs, err := l.Store.List(ctx, prefix)
	l.read += len(kvs)
	return kvs, err
}

// Creating and revoking a token read only the tokens sharing its ID, not
// every token (which made creating n tokens cost n² decodes), and an ID
// that cannot be one matches nothing.
func TestTokenOperationsReadOnlyTheirID(t *testing.T) {
	ctx := context.Background()
	st := &listCounter{Store: store.NewMemory()}
	tokens := NewTokens(st, nil)
	var last Token
	for i := range 50 {
		_, tok, err := tokens.Create(ctx, TokenRequest{Service: mesh.MeshService{Namespace: "default", Name: fmt.Sprintf("svc-%d", i)}})
		if err != nil {
			t.Fatal(err)
		}
		last = tok
	}
	if st.read > 5 { // 50 random 32-bit IDs collide with odds of about 3 in 10 million
		t.Errorf("creating 50 tokens read %d stored tokens, want about none", st.read)
	}
	st.read = 0
	if _, err := tokens.Revoke(ctx, last.ID); err != nil {
		t.Fatal(err)
	}
	if st.read != 1 {
		t.Errorf("revoking one token read %d stored tokens, want 1", st.read)
	}
	for _, id := range []string{"", "DEADBEEF", "0000000x", last.ID[:4], last.ID + "0"} {
		if _, err := tokens.Revoke(ctx, id); !errors.Is(err, ErrTokenNotFound) {
			t.Errorf("Revoke(%q) = %v, want ErrTokenNotFound", id, err)
		}
	}
	list, err := tokens.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if revoked := slices.IndexFunc(list, func(x Token) bool { return x.Revoked }); len(list) != 50 || revoked < 0 || list[revoked].ID != last.ID {
		t.Errorf("after revoking %s: %d tokens, revoked at %d; want 50 with only %s revoked", last.ID, len(list), revoked, last.ID)
	}
}

// Prune deletes the tokens dead (expired, or revoked) for longer than the
// retention, and only those; a token changed since it was read stays.
func TestPruneTokens(t *testing.T) {
	ctx := context.Background()
	st := store.NewMemory()
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	tokens := NewTokens(st, func() time.Time { return now })
	create := func(name string, ttl time.Duration) Token {
		t.Helper()
		_, tok, err := tokens.Create(ctx, TokenRequest{Service: mesh.MeshService{Namespace: "default", Name: name}, TTL: ttl})
		if err != nil {
			t.Fatal(err)
		}
		return tok
	}
	const retention = 48 * time.Hour
	longDead := create("long-dead", time.Hour)              // expires at +1h
	recentlyDead := create("recently-dead", 3*24*time.Hour) // expires at +3d
	revokedLong := create("revoked", 30*24*time.Hour)
	valid := create("valid", 30*24*time.Hour)
	if _, err := tokens.Revoke(ctx, revokedLong.ID); err != nil {
		t.Fatal(err)
	}
	now = now.Add(4 * 24 * time.Hour) // long-dead: dead 95h; recently-dead: 24h; revoked: 96h
	n, err := tokens.Prune(ctx, retention)
	if err != nil {
		t.Fatal(err)
	}
	list, err := tokens.List(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var left []string
	for _, tok := range list {
		left = append(left, tok.Service.Name)
	}
	slices.Sort(left)
	if want := []string{recentlyDead.Service.Name, valid.Service.Name}; n != 2 || !slices.Equal(left, want) {
		t.Errorf("Prune deleted %d, left %v; want 2 deleted (%s, %s), left %v", n, left, longDead.Service.Name, revokedLong.Service.Name, want)
	}
	if n, err := tokens.Prune(ctx, retention); err != nil || n != 0 {
		t.Errorf("pruning again = %d, %v; want 0, nil", n, err)
	}
}

// More dead tokens than one transaction may hold are deleted in
// transactions within the store's limits (store.Memory refuses more, as
// Consul does).
func TestPruneManyTokens(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	tokens := NewTokens(store.NewMemory(), func() time.Time { return now })
	const n = 2*store.MaxTxnOps + 3
	for range n {
		if _, _, err := tokens.Create(ctx, TokenRequest{Service: mesh.MeshService{Namespace: "default", Name: "web"}, TTL: time.Hour}); err != nil {
			t.Fatal(err)
		}
	}
	now = now.Add(2 * time.Hour)
	if got, err := tokens.Prune(ctx, 0); err != nil || got != n {
		t.Errorf("Prune = %d, %v; want %d, nil", got, err, n)
	}
}

// A token changed between Prune's listing and its delete is not deleted.
func TestPruneKeepsATokenChangedMeanwhile(t *testing.T) {
	ctx := context.Background()
	now := time.Date(2026, 1, 10, 12, 0, 0, 0, time.UTC)
	st := &changingStore{Memory: store.NewMemory()}
	tokens := NewTokens(st, func() time.Time { return now })
	var ids []string
	for i := range 3 {
		_, tok, err := tokens.Create(ctx, TokenRequest{Service: mesh.MeshService{Namespace: "default", Name: fmt.Sprintf("svc-%d", i)}, TTL: time.Hour})
		if err != nil {
			t.Fatal(err)
		}
		ids = append(ids, tok.ID)
	}
	now = now.Add(time.Hour)
	st.touch = ids[1] // rewritten after the listing
	n, err := tokens.Prune(ctx, 0)
	if err != nil {
		t.Fatal(err)
	}
	list, _ := tokens.List(ctx)
	if n != 2 || len(list) != 1 || list[0].ID != ids[1] {
		t.Errorf("Prune deleted %d and left %v; want 2 deleted and only %s left", n, list, ids[1])
	}
}

// changingStore rewrites the token whose ID is touch right after the
// first List of the tokens.
type changingStore struct {
	*store.Memory
	touch string
}

func (c *changingStore) List(ctx context.Context, prefix string) ([]store.KV, error) {
	kvs, err := c.Memory.List(ctx, prefix)
	if c.touch == "" || prefix != TokenPrefix {
		return kvs, err
	}
	for _, kv := range kvs {
		if strings.HasPrefix(kv.Key, TokenPrefix+c.touch) {
			if ok, err := c.Memory.Txn(ctx, store.Set(kv.Key, kv.Version, kv.Value)); err != nil || !ok {
				return nil, fmt.Errorf("touch %s: %v %v", c.touch, ok, err)
			}
		}
	}
	c.touch = ""
	return kvs, err
}
