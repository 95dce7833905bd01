package sessionticket

import (
	"bytes"
	"crypto/rand"
	"crypto/tls"
	"sync"
)

// A ticket this process makes is ticketMagic, a random id and crypto/tls's
// own encrypted ticket (EncryptTicket with the kept keys). The id finds the
// session's state in the process's sessions, so that a proxy reconnecting
// to the process that made its ticket resumes without the ticket being
// decrypted and its client certificate parsed again (crypto/tls's
// ParseSessionState parses it: its certificate cache holds only what
// another session's parse made, never a full handshake's certificates).
// That is a tenth of a resumed handshake's server CPU, measured in a
// reconnect storm of 10,000 proxies (docs/performance.md). Any other server
// sharing the keys (a replica, this one restarted) decrypts the rest.
//
// The id is not a credential: a resumption also proves the session's
// secret (the PSK binder, checked by crypto/tls against the state found).
// A ClientHello replaying an id seen on the wire (the pre_shared_key
// extension is not encrypted) fails that check, and at worst its taking
// the state leaves the proxy's own resumption to the decryption.
var ticketMagic = []byte("osm1")

const ticketIDSize = 16

// maxSessions bounds the states kept. A state costs about 0.3 KiB while
// its proxy stays connected (its certificates are the connection's), and
// its client certificate too (3.8 KiB parsed, with its DER) once the
// proxy went elsewhere and its ticket was not used here again: 130 MiB
// at the very most. Past the bound an arbitrary state is dropped: its
// proxy's next resumption here decrypts.
const maxSessions = 1 << 15

// sessions holds the state of each ticket this process made and no
// resumption has used yet. A ticket is used once: each resumption gets a
// new one (crypto/tls sends it), which replaces the one used.
type sessions struct {
	mu sync.Mutex
	m  map[[ticketIDSize]byte]*tls.SessionState
}

func (s *sessions) put(id [ticketIDSize]byte, ss *tls.SessionState) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.m == nil {
		s.m = make(map[[ticketIDSize]byte]*tls.SessionState)
	}
	if len(s.m) >= maxSessions {
		for old := range s.m { // Go's map iteration starts anywhere
			delete(s.m, old)
			break
		}
	}
	s.m[id] = ss
}

// take returns the state of id and forgets it, or nil.
func (s *sessions) take(id [ticketIDSize]byte) *tls.SessionState {
	s.mu.Lock()
	defer s.mu.Unlock()
	ss := s.m[id]
	delete(s.m, id)
	return ss
}

// clear forgets every state: their tickets' keys are no longer kept.
func (s *sessions) clear() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.m = nil
}

func (s *sessions) len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.m)
}

// wrap makes ss's ticket: ticketMagic, a new id and the encrypted state.
func (k *Keeper) wrap(cs tls.ConnectionState, ss *tls.SessionState) ([]byte, error) {
	enc, err := k.keys.Load().tls.EncryptTicket(cs, ss)
	if err != nil {
		return nil, err
	}
	var id [ticketIDSize]byte
	_, _ = rand.Read(id[:]) // crypto/rand.Read does not fail (Go 1.24)
	k.sessions.put(id, ss)
	t := make([]byte, 0, len(ticketMagic)+ticketIDSize+len(enc))
	t = append(append(append(t, ticketMagic...), id[:]...), enc...)
	return t, nil
}

// unwrap finds the state of a ticket this process made, or decrypts it
// (another replica's ticket, or this server's before it restarted). A
// ticket no kept key decrypts (another mesh's, one older than every key)
// is not an error: the handshake goes on in full.
func (k *Keeper) unwrap(identity []byte, cs tls.ConnectionState) (*tls.SessionState, error) {
	dec := k.keys.Load().tls.DecryptTicket
	if rest, ok := bytes.CutPrefix(identity, ticketMagic); ok && len(rest) > ticketIDSize {
		if ss := k.sessions.take([ticketIDSize]byte(rest[:ticketIDSize])); ss != nil {
			return ss, nil
		}
		if ss, err := dec(rest[ticketIDSize:], cs); ss != nil || err != nil {
			return ss, err
		}
	}
	// A ticket of crypto/tls's own format, made before this one was (by
	// an older osm-server); one whose random start happens to be
	// ticketMagic is tried both ways.
	return dec(identity, cs)
}
