// Package sessionticket keeps the keys osm-server's xDS port encrypts TLS
// session tickets with, in the store, so that a proxy reconnecting after its
// server restarted, or to another replica on the same store, resumes its
// TLS session: no certificate is signed, sent or verified on either side,
// only the key exchange is made again. crypto/tls keeps its own keys in
// memory, so without this every proxy of a restarted or failed server makes
// a full handshake, which is when a whole fleet reconnects at once.
//
// A resumed session carries the client certificate of the handshake that
// made it; osm-server still checks it on every resumption (the xDS server's
// VerifyConnection runs for resumed handshakes too, and crypto/tls refuses
// a session whose certificate has expired), so a revoked proxy cannot
// resume its way back in.
//
// The keys are as secret as the mesh CA's key, which the store holds too.
// One key encrypts; it is replaced after the rotation period (a day by
// default) by whichever replica sees it due first, with a check-and-set,
// and kept to decrypt for as long as a ticket it encrypted may be used
// (crypto/tls's seven days), so a rotation ends no session.
//
// A proxy reconnecting to the process that made its ticket resumes from
// the session the process kept for it, without decrypting or parsing
// anything (see wrap).
package sessionticket

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/tls"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"
)

// Key is the store key of the ticket keys.
const Key = "certificate/session-tickets"

// DefaultRotation is how long one key encrypts new tickets.
const DefaultRotation = 24 * time.Hour

// ticketLifetime is the longest crypto/tls lets a client use a TLS 1.3
// ticket (maxSessionTicketLifetime): a key decrypts for this long after it
// stopped encrypting.
const ticketLifetime = 7 * 24 * time.Hour

// keySize is the size of a key crypto/tls takes (SetSessionTicketKeys).
const keySize = 32

// kv is the part of the store the keeper uses.
type kv interface {
	Get(ctx context.Context, key string) (value []byte, version uint64, err error)
	CompareAndSwap(ctx context.Context, key string, version uint64, value []byte) (newVersion uint64, ok bool, err error)
	Watch(ctx context.Context, prefix string) <-chan struct{}
}

// record is the stored form: newest key first.
type record struct {
	Keys []storedKey `json:"keys"`
}

type storedKey struct {
	Key     []byte    `json:"key"`
	Created time.Time `json:"created"`
}

// Keeper holds the current keys and keeps them in step with the store.
type Keeper struct {
	log      *slog.Logger
	st       kv
	rotation time.Duration
	now      func() time.Time

	keys atomic.Pointer[keySet] // the keys in use

	sessions sessions // the states of this process's unused tickets (see wrap)
}

// keySet is a record of keys and a bare tls.Config holding them
// (SetSessionTicketKeys): its EncryptTicket and DecryptTicket are
// crypto/tls's own ticket format and cryptography.
type keySet struct {
	rec *record
	tls *tls.Config
}

// New returns a keeper of the keys at Key in st, each encrypting for
// rotation (DefaultRotation when 0). Until Load has read them it holds one
// key of its own, in memory only.
func New(log *slog.Logger, st kv, rotation time.Duration) (*Keeper, error) {
	if rotation <= 0 {
		rotation = DefaultRotation
	}
	k := &Keeper{log: log, st: st, rotation: rotation, now: time.Now}
	first, err := newKey(k.now())
	if err != nil {
		return nil, err
	}
	k.use(&record{Keys: []storedKey{first}})
	return k, nil
}

// Apply makes cfg encrypt and decrypt its session tickets with the kept
// keys. Copies of cfg (tls.Config.Clone, gRPC's credentials) follow the
// keeper's rotations, which a SetSessionTicketKeys on cfg would not.
func (k *Keeper) Apply(cfg *tls.Config) {
	cfg.WrapSession = k.wrap
	cfg.UnwrapSession = k.unwrap
}

// Load reads the keys from the store, and creates or rotates them there
// when there are none or the newest is due. osm-server calls it before its
// xDS port opens.
func (k *Keeper) Load(ctx context.Context) error {
	return k.sync(ctx)
}

// Run follows the keys other replicas write and rotates them when due,
// until ctx is done. A store error is logged and tried again; the keys in
// use stay in use meanwhile.
func (k *Keeper) Run(ctx context.Context) error {
	changed := k.st.Watch(ctx, Key)
	const minBackoff, maxBackoff = time.Second, 5 * time.Minute
	var backoff time.Duration
	for {
		wait := backoff
		if backoff == 0 {
			wait = k.nextRotation().Sub(k.now())
		}
		t := time.NewTimer(max(wait, 0))
		select {
		case <-ctx.Done():
			t.Stop()
			return nil
		case <-changed:
		case <-t.C:
		}
		t.Stop()
		if err := k.sync(ctx); err != nil {
			if ctx.Err() != nil {
				return nil
			}
			backoff = min(max(2*backoff, minBackoff), maxBackoff)
			k.log.Error("TLS session ticket keys: the xDS port keeps the keys it has", "err", err, "retryIn", backoff)
			continue
		}
		backoff = 0
	}
}

// nextRotation is when the newest key is due to be replaced.
func (k *Keeper) nextRotation() time.Time {
	return k.keys.Load().rec.Keys[0].Created.Add(k.rotation)
}

// sync reads the stored keys, writes a new set when they are missing,
// unreadable or due, and uses what the store holds after.
func (k *Keeper) sync(ctx context.Context) error {
	for range 5 {
		raw, ver, err := k.st.Get(ctx, Key)
		if err != nil {
			return fmt.Errorf("read TLS session ticket keys at store key %s: %w", Key, err)
		}
		now := k.now()
		var rec record
		if ver != 0 {
			if err := decode(raw, &rec); err != nil {
				// The keys only speed reconnections up: new ones cost each
				// proxy one full handshake, and serving goes on.
				k.log.Warn("TLS session ticket keys in the store do not decode; replacing them (each proxy makes one full TLS handshake)", "key", Key, "err", err)
				rec = record{}
			}
		}
		if len(rec.Keys) > 0 && now.Sub(rec.Keys[0].Created) < k.rotation {
			k.use(&rec)
			return nil
		}
		next, err := rotate(rec, now, k.rotation)
		if err != nil {
			return err
		}
		val, err := json.Marshal(next)
		if err != nil {
			return err
		}
		_, ok, err := k.st.CompareAndSwap(ctx, Key, ver, val)
		if err != nil {
			return fmt.Errorf("write TLS session ticket keys at store key %s: %w", Key, err)
		}
		if ok {
			k.log.Info("TLS session ticket key rotated", "keys", len(next.Keys), "nextRotation", now.Add(k.rotation))
			k.use(&next)
			return nil
		}
		// Another replica wrote first: use what it wrote.
	}
	return fmt.Errorf("TLS session ticket keys at store key %s: written concurrently five times in a row", Key)
}

// decode parses a stored record and checks every key.
func decode(raw []byte, rec *record) error {
	if err := json.Unmarshal(raw, rec); err != nil {
		return err
	}
	if len(rec.Keys) == 0 {
		return errors.New("no keys")
	}
	for i, sk := range rec.Keys {
		if len(sk.Key) != keySize {
			return fmt.Errorf("key %d holds %d bytes, not %d", i, len(sk.Key), keySize)
		}
		if i > 0 && sk.Created.After(rec.Keys[i-1].Created) {
			return fmt.Errorf("key %d is newer than key %d (newest first)", i, i-1)
		}
	}
	return nil
}

// rotate returns rec with a new key first and without the keys no ticket
// can need any more: a key stops encrypting when the next one is made, and
// a ticket is used for ticketLifetime at most.
func rotate(rec record, now time.Time, rotation time.Duration) (record, error) {
	first, err := newKey(now)
	if err != nil {
		return record{}, err
	}
	next := record{Keys: []storedKey{first}}
	stoppedAt := now // when the key at hand stopped encrypting
	for _, sk := range rec.Keys {
		if now.Sub(stoppedAt) > ticketLifetime {
			break
		}
		next.Keys = append(next.Keys, sk)
		stoppedAt = sk.Created
	}
	return next, nil
}

func newKey(now time.Time) (storedKey, error) {
	b := make([]byte, keySize)
	if _, err := rand.Read(b); err != nil {
		return storedKey{}, fmt.Errorf("TLS session ticket key: %w", err)
	}
	return storedKey{Key: b, Created: now.UTC()}, nil
}

// use makes rec's keys the ones tickets are encrypted and decrypted with.
func (k *Keeper) use(rec *record) {
	keys := make([][keySize]byte, len(rec.Keys))
	for i, sk := range rec.Keys {
		copy(keys[i][:], sk.Key)
	}
	cfg := &tls.Config{}
	cfg.SetSessionTicketKeys(keys)
	if old := k.keys.Swap(&keySet{rec: rec, tls: cfg}); old != nil && !holds(rec, old.rec.Keys[0].Key) {
		// The key this process's tickets were made with is gone (the
		// stored keys were replaced, not rotated): so are their sessions.
		k.sessions.clear()
	}
}

// holds reports whether rec keeps key.
func holds(rec *record, key []byte) bool {
	for _, sk := range rec.Keys {
		if bytes.Equal(sk.Key, key) {
			return true
		}
	}
	return false
}
