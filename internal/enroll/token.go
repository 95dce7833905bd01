package enroll

import (
	"cmp"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"strings"
	"time"

	"github.com/osm-vm/osm-vm/internal/keylock"
	"github.com/osm-vm/osm-vm/internal/mesh"
	"github.com/osm-vm/osm-vm/internal/store"
)

// Store is what enrollment needs from internal/store.
type Store interface {
	Get(ctx context.Context, key string) (value []byte, version uint64, err error)
	List(ctx context.Context, prefix string) ([]store.KV, error)
	Txn(ctx context.Context, ops ...store.Op) (ok bool, err error)
}

// TokenPrefix is the store prefix of join tokens; each key is TokenPrefix
// followed by the hex SHA-256 of the token's secret.
const TokenPrefix = "enroll/token/"

// Defaults of a TokenRequest.
const (
	DefaultTokenTTL  = 24 * time.Hour
	DefaultTokenUses = 1
)

// secretLen is the length of a token secret: 32 random bytes in hex.
const secretLen = 64

// idLen is the length of a token's ID, the start of its secret's hash.
const idLen = 8

// Errors of token operations, wrapped with the detail.
var (
	// ErrTokenNotFound: no token has the ID (Revoke).
	ErrTokenNotFound = errors.New("join token not found")
	// ErrTokenInvalid: a token request is invalid (Create).
	ErrTokenInvalid = errors.New("invalid join token request")
)

// Token is a join token as stored and listed. The secret is never stored.
type Token struct {
	// ID is the public short ID: the first 8 hex characters of the hash.
	ID             string           `json:"id"`
	Service        mesh.MeshService `json:"service"`
	ServiceAccount string           `json:"serviceAccount"`
	Created        time.Time        `json:"created"`
	Expires        time.Time        `json:"expires"`
	UsesTotal      int              `json:"usesTotal"`
	UsesLeft       int              `json:"usesLeft"`
	Revoked        bool             `json:"revoked,omitempty"`
	RevokedAt      *time.Time       `json:"revokedAt,omitempty"`
}

// Token states, as returned by [Token.State].
const (
	StateValid   = "valid"
	StateExpired = "expired"
	StateRevoked = "revoked"
	StateUsedUp  = "used up"
)

// State returns valid, expired, revoked or used up at now. A revoked
// token reports revoked even when it has also expired.
func (t Token) State(now time.Time) string {
	switch {
	case t.Revoked:
		return StateRevoked
	case !now.Before(t.Expires):
		return StateExpired
	case t.UsesLeft <= 0:
		return StateUsedUp
	}
	return StateValid
}

// MeshServiceAccount returns the service account proxies enrolled with the
// token run as.
func (t Token) MeshServiceAccount() mesh.ServiceAccount {
	return mesh.ServiceAccount{Namespace: t.Service.Namespace, Name: t.ServiceAccount}
}

// TokenRequest asks for a new join token.
type TokenRequest struct {
	Service mesh.MeshService
	// ServiceAccount defaults to the service's name.
	ServiceAccount string
	// TTL defaults to DefaultTokenTTL.
	TTL time.Duration
	// Uses defaults to DefaultTokenUses.
	Uses int
}

// Tokens creates, lists, revokes and spends join tokens kept in a Store.
type Tokens struct {
	st  Store
	now func() time.Time
	// spends serialises the spends of each token in this process.
	spends keylock.Set
}

// NewTokens returns the join tokens kept in st; now defaults to time.Now.
func NewTokens(st Store, now func() time.Time) *Tokens {
	if now == nil {
		now = time.Now
	}
	return &Tokens{st: st, now: now}
}

// Create makes a new token and returns its secret (shown once, never
// stored) and its record.
func (t *Tokens) Create(ctx context.Context, req TokenRequest) (string, Token, error) {
	if err := req.Service.Validate(); err != nil {
		return "", Token{}, fmt.Errorf("%w: %w", ErrTokenInvalid, err)
	}
	sa := cmp.Or(req.ServiceAccount, req.Service.Name)
	if err := mesh.ValidateLabel("service account", sa); err != nil {
		return "", Token{}, fmt.Errorf("%w: %w", ErrTokenInvalid, err)
	}
	if req.TTL < 0 {
		return "", Token{}, fmt.Errorf("%w: ttl %s is negative: give a positive duration such as 24h", ErrTokenInvalid, req.TTL)
	}
	if req.Uses < 0 {
		return "", Token{}, fmt.Errorf("%w: uses %d is negative: give 1 or more", ErrTokenInvalid, req.Uses)
	}
	ttl := cmp.Or(req.TTL, DefaultTokenTTL)
	uses := cmp.Or(req.Uses, DefaultTokenUses)

	for range 5 {
		var raw [32]byte
		if _, err := rand.Read(raw[:]); err != nil {
			return "", Token{}, fmt.Errorf("generate join token: %w", err)
		}
		secret := hex.EncodeToString(raw[:])
		hash := hashSecret(secret)
		id := hash[:idLen]
		// Keep short IDs unique so Revoke is unambiguous. An ID is the
		// prefix of its key's hash, so only tokens sharing it are read.
		if same, err := t.withID(ctx, id); err != nil {
			return "", Token{}, err
		} else if len(same) > 0 {
			continue
		}
		now := t.now().UTC().Truncate(time.Second)
		tok := Token{
			ID:             id,
			Service:        req.Service,
			ServiceAccount: sa,
			Created:        now,
			Expires:        now.Add(ttl),
			UsesTotal:      uses,
			UsesLeft:       uses,
		}
		val, err := json.Marshal(tok)
		if err != nil {
			return "", Token{}, fmt.Errorf("encode join token: %w", err)
		}
		ok, err := t.st.Txn(ctx, store.Set(TokenPrefix+hash, 0, val))
		if err != nil {
			return "", Token{}, fmt.Errorf("store join token: %w", err)
		}
		if ok {
			return secret, tok, nil
		}
	}
	return "", Token{}, errors.New("create join token: could not find an unused token ID after 5 tries")
}

// List returns every token, newest first.
func (t *Tokens) List(ctx context.Context) ([]Token, error) {
	kvs, err := t.st.List(ctx, TokenPrefix)
	if err != nil {
		return nil, fmt.Errorf("list join tokens: %w", err)
	}
	out := make([]Token, 0, len(kvs))
	for _, kv := range kvs {
		var tok Token
		if err := json.Unmarshal(kv.Value, &tok); err != nil {
			return nil, fmt.Errorf("join token %s: decode: %w", kv.Key, err)
		}
		out = append(out, tok)
	}
	slices.SortFunc(out, func(a, b Token) int {
		if c := b.Created.Compare(a.Created); c != 0 {
			return c
		}
		return strings.Compare(a.ID, b.ID)
	})
	return out, nil
}

// Revoke marks the token with the ID revoked; revoking a revoked token is
// not an error. Proxies already enrolled with it keep their certificates.
func (t *Tokens) Revoke(ctx context.Context, id string) (Token, error) {
	for range 5 {
		same, err := t.withID(ctx, id)
		if err != nil {
			return Token{}, err
		}
		if len(same) == 0 {
			return Token{}, fmt.Errorf("%w: no join token has ID %q (list them with `osm-server token list`)", ErrTokenNotFound, id)
		}
		tok, key, version := same[0].tok, same[0].key, same[0].version
		if tok.Revoked {
			return tok, nil
		}
		now := t.now().UTC().Truncate(time.Second)
		tok.Revoked, tok.RevokedAt = true, &now
		val, err := json.Marshal(tok)
		if err != nil {
			return Token{}, fmt.Errorf("encode join token: %w", err)
		}
		ok, err := t.st.Txn(ctx, store.Set(key, version, val))
		if err != nil {
			return Token{}, fmt.Errorf("revoke join token %s: %w", id, err)
		}
		if ok {
			return tok, nil
		}
	}
	return Token{}, fmt.Errorf("revoke join token %s: it kept changing under us (5 tries); try again", id)
}

// DefaultTokenRetention is how long a token is kept after it stopped
// being usable (see [Tokens.Prune]).
const DefaultTokenRetention = 7 * 24 * time.Hour

// Prune deletes the tokens that stopped being usable (expired, or
// revoked) more than retention ago, so the store does not keep every token
// ever made; `token list` shows the recent ones. A used-up token is
// pruned by its expiry (its last use has no time). It returns how many it
// deleted; a token changed meanwhile is left for the next Prune.
func (t *Tokens) Prune(ctx context.Context, retention time.Duration) (int, error) {
	kvs, err := t.st.List(ctx, TokenPrefix)
	if err != nil {
		return 0, fmt.Errorf("list join tokens: %w", err)
	}
	now := t.now()
	var ops []store.Op
	for _, kv := range kvs {
		var tok Token
		if err := json.Unmarshal(kv.Value, &tok); err != nil {
			continue // not ours to judge; List reports it
		}
		dead := tok.Expires
		if tok.Revoked && tok.RevokedAt != nil && tok.RevokedAt.Before(dead) {
			dead = *tok.RevokedAt
		}
		if now.Sub(dead) >= retention {
			ops = append(ops, store.Delete(kv.Key, kv.Version))
		}
	}
	// A transaction per batch (each is a disk sync); a batch with a token
	// changed meanwhile is retried one token at a time.
	const batch = store.MaxTxnOps // what every store takes in one transaction
	n := 0
	for chunk := range slices.Chunk(ops, batch) {
		ok, err := t.st.Txn(ctx, chunk...)
		if err != nil {
			return n, fmt.Errorf("prune join tokens: %w", err)
		}
		if ok {
			n += len(chunk)
			continue
		}
		for _, op := range chunk {
			ok, err := t.st.Txn(ctx, op)
			if err != nil {
				return n, fmt.Errorf("prune join tokens: %w", err)
			}
			if ok {
				n++
			}
		}
	}
	return n, nil
}

// storedToken is a token with its store key and version.
type storedToken struct {
	tok     Token
	key     string
	version uint64
}

// withID returns the tokens whose ID is id. A token's ID is the first
// idLen hex digits of the hash in its key, so only keys with that prefix
// are read, not every token (creating the 10,000th token read 10,000).
func (t *Tokens) withID(ctx context.Context, id string) ([]storedToken, error) {
	if len(id) != idLen || strings.Trim(id, "0123456789abcdef") != "" {
		return nil, nil // no token has such an ID; and "" would list them all
	}
	kvs, err := t.st.List(ctx, TokenPrefix+id)
	if err != nil {
		return nil, fmt.Errorf("list join tokens: %w", err)
	}
	var out []storedToken
	for _, kv := range kvs {
		var x Token
		if err := json.Unmarshal(kv.Value, &x); err != nil {
			return nil, fmt.Errorf("join token %s: decode: %w", kv.Key, err)
		}
		if x.ID == id {
			out = append(out, storedToken{x, kv.Key, kv.Version})
		}
	}
	return out, nil
}

// lookup returns the token with the secret, its store key and version;
// version 0 means there is none.
func (t *Tokens) lookup(ctx context.Context, secret string) (Token, string, uint64, error) {
	key, ok := tokenKey(secret)
	if !ok {
		return Token{}, "", 0, nil
	}
	val, version, err := t.st.Get(ctx, key)
	if err != nil || version == 0 {
		return Token{}, key, 0, err
	}
	var tok Token
	if err := json.Unmarshal(val, &tok); err != nil {
		return Token{}, key, 0, fmt.Errorf("join token %s: decode: %w", key, err)
	}
	return tok, key, version, nil
}

// tokenKey returns the store key of the token with the secret; ok is
// false when secret is not a well-formed token secret.
func tokenKey(secret string) (key string, ok bool) {
	if !validSecret(secret) {
		return "", false
	}
	return TokenPrefix + hashSecret(secret), true
}

func hashSecret(secret string) string {
	sum := sha256.Sum256([]byte(secret))
	return hex.EncodeToString(sum[:])
}

func validSecret(s string) bool {
	if len(s) != secretLen {
		return false
	}
	for _, c := range []byte(s) {
		if !('0' <= c && c <= '9' || 'a' <= c && c <= 'f') {
			return false
		}
	}
	return true
}
