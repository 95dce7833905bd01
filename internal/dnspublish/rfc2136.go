package dnspublish

import (
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"net"
	"os"
	"regexp"
	"slices"
	"strings"
	"time"

	"github.com/miekg/dns"
)

// TSIG algorithms RFC2136 accepts, by their BIND names.
var tsigAlgorithms = map[string]string{
	"hmac-sha1":   dns.HmacSHA1,
	"hmac-sha224": dns.HmacSHA224,
	"hmac-sha256": dns.HmacSHA256,
	"hmac-sha384": dns.HmacSHA384,
	"hmac-sha512": dns.HmacSHA512,
}

// TSIGAlgorithms lists the accepted algorithm names, sorted.
func TSIGAlgorithms() []string {
	out := make([]string, 0, len(tsigAlgorithms))
	for k := range tsigAlgorithms {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// RFC2136Config is how to reach an authoritative server that takes RFC 2136
// dynamic updates signed with TSIG, and lets the same key transfer the
// zone (AXFR), which is how the zone's records are read.
type RFC2136Config struct {
	// Zone is the zone to change, such as "mesh.example.com".
	Zone string
	// Server is the primary's host:port.
	Server string
	// TSIGKeyName, TSIGAlgorithm (see TSIGAlgorithms) and TSIGSecret
	// (base64) are the key the server allows to update and transfer.
	TSIGKeyName, TSIGAlgorithm, TSIGSecret string
	// Timeout bounds each exchange (default 5s).
	Timeout time.Duration
}

// RFC2136 is the Provider for RFC 2136 dynamic updates with TSIG.
type RFC2136 struct {
	zone    string // lower case, no final dot
	fqdn    string // zone with the final dot
	server  string
	key     string // canonical key name
	alg     string
	secrets map[string]string
	timeout time.Duration
}

// NewRFC2136 checks c and returns the Provider.
func NewRFC2136(c RFC2136Config) (*RFC2136, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	zone := strings.TrimSuffix(strings.ToLower(c.Zone), ".")
	key := dns.CanonicalName(c.TSIGKeyName)
	return &RFC2136{
		zone: zone, fqdn: dns.Fqdn(zone), server: c.Server, key: key, alg: tsigAlgorithms[c.TSIGAlgorithm],
		secrets: map[string]string{key: c.TSIGSecret}, timeout: cmpDuration(c.Timeout, 5*time.Second),
	}, nil
}

func cmpDuration(d, def time.Duration) time.Duration {
	if d <= 0 {
		return def
	}
	return d
}

// Validate checks the configuration, naming the key and the fix.
func (c RFC2136Config) Validate() error {
	var errs []error
	if !isDomain(c.Zone) {
		errs = append(errs, fmt.Errorf("dns.zone %q is not a DNS name: give the zone osm-server may change, such as mesh.example.com", c.Zone))
	}
	if host, port, err := net.SplitHostPort(c.Server); err != nil || host == "" || port == "" {
		errs = append(errs, fmt.Errorf("dns.rfc2136.server %q is not host:port: give the primary server's address, such as 192.0.2.53:53", c.Server))
	}
	if !isDomain(c.TSIGKeyName) {
		errs = append(errs, fmt.Errorf("dns.rfc2136.tsigKeyName %q is not a key name: give the name of the key in the server's configuration, such as osm-vm", c.TSIGKeyName))
	}
	if _, ok := tsigAlgorithms[c.TSIGAlgorithm]; !ok {
		errs = append(errs, fmt.Errorf("dns.rfc2136.tsigAlgorithm %q: want one of %s", c.TSIGAlgorithm, strings.Join(TSIGAlgorithms(), ", ")))
	}
	if b, err := base64.StdEncoding.DecodeString(c.TSIGSecret); err != nil || len(b) == 0 {
		errs = append(errs, errors.New("the TSIG secret is not base64: put the key's secret (as tsig-keygen prints it) in dns.rfc2136.tsigSecretFile"))
	}
	return errors.Join(errs...)
}

var label = regexp.MustCompile(`^[a-z0-9]([-a-z0-9_]*[a-z0-9])?$`)

// isDomain reports whether s is a DNS name of letters, digits, '-' and
// '_' labels (a final dot allowed).
func isDomain(s string) bool {
	s = strings.TrimSuffix(strings.ToLower(s), ".")
	if s == "" || len(s) > 253 {
		return false
	}
	for l := range strings.SplitSeq(s, ".") {
		if len(l) > 63 || !label.MatchString(l) {
			return false
		}
	}
	return true
}

var bindSecret = regexp.MustCompile(`secret\s+"([^"]+)"`)

// ReadTSIGSecret reads a TSIG secret from path: either the base64 secret
// alone or a BIND key clause (what tsig-keygen prints).
func ReadTSIGSecret(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("dns.rfc2136.tsigSecretFile: %w", err)
	}
	s := strings.TrimSpace(string(b))
	if m := bindSecret.FindStringSubmatch(s); m != nil {
		s = m[1]
	}
	if d, err := base64.StdEncoding.DecodeString(s); err != nil || len(d) == 0 {
		return "", fmt.Errorf("dns.rfc2136.tsigSecretFile %s: holds neither a base64 secret nor a BIND key clause with one (make it with tsig-keygen)", path)
	}
	return s, nil
}

// Zone returns the zone.
func (r *RFC2136) Zone() string { return r.zone }

// Records reads the zone by AXFR signed with the key.
func (r *RFC2136) Records(ctx context.Context) ([]RecordSet, error) {
	m := new(dns.Msg)
	m.SetAxfr(r.fqdn)
	m.SetTsig(r.key, r.alg, 300, time.Now().Unix())
	d := net.Dialer{Timeout: r.timeout}
	conn, err := d.DialContext(ctx, "tcp", r.server)
	if err != nil {
		return nil, fmt.Errorf("read the zone (AXFR) from %s: %w (is the server up and listening on TCP?)", r.server, err)
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	defer stop()
	t := &dns.Transfer{Conn: &dns.Conn{Conn: conn}, TsigSecret: r.secrets, ReadTimeout: r.timeout}
	env, err := t.In(m, r.server)
	if err != nil {
		conn.Close()
		return nil, fmt.Errorf("read the zone (AXFR) from %s: %w", r.server, err)
	}
	sets := map[[2]string]*RecordSet{}
	var keys [][2]string
	var failed error
	for e := range env {
		if e.Error != nil {
			if failed == nil {
				failed = e.Error
			}
			continue
		}
		for _, rr := range e.RR {
			h := rr.Header()
			var typ, val string
			var txt []string
			switch v := rr.(type) {
			case *dns.A:
				typ, val = TypeA, v.A.String()
			case *dns.AAAA:
				typ, val = TypeAAAA, v.AAAA.String()
			case *dns.TXT:
				typ, val, txt = TypeTXT, strings.Join(v.Txt, ""), v.Txt
			default:
				continue
			}
			k := [2]string{strings.TrimSuffix(strings.ToLower(h.Name), "."), typ}
			s := sets[k]
			if s == nil {
				s = &RecordSet{Name: k[0], Type: typ, TTL: time.Duration(h.Ttl) * time.Second}
				sets[k] = s
				keys = append(keys, k)
			}
			s.Values = append(s.Values, val)
			if typ == TypeTXT {
				s.TXT = append(s.TXT, txt)
			}
		}
	}
	if failed != nil {
		return nil, fmt.Errorf("read the zone %s (AXFR) from %s: %w%s", r.zone, r.server, failed, hint(failed))
	}
	out := make([]RecordSet, 0, len(keys))
	for _, k := range keys {
		out = append(out, *sets[k])
	}
	return out, nil
}

// hint says what to check for an AXFR or update failure.
func hint(err error) string {
	s := err.Error()
	switch {
	case errors.Is(err, dns.ErrSig), strings.Contains(s, "NOTAUTH"), strings.Contains(s, "bad authentication"), strings.Contains(s, "BADSIG"), strings.Contains(s, "BADKEY"):
		return " (the server does not accept the TSIG key: check dns.rfc2136.tsigKeyName, tsigAlgorithm and the secret file against the server's key)"
	case strings.Contains(s, "REFUSED"):
		return " (the server refused: allow the TSIG key to update and transfer the zone, e.g. BIND's allow-update and allow-transfer { key ...; })"
	}
	return ""
}

// Apply sends one signed UPDATE for c, with the ownership as prerequisite
// (see Change). RFC 2136 compares a value-dependent prerequisite with the
// whole RRset, so the ownership prerequisite names the ownership record's
// RRset, which only osm-vm writes; the name's own TXT records (SPF,
// domain verification) are named only to adopt an in-name record, as they
// were read, and never changed: the only TXT record removed at the name
// is the ownership value itself.
func (r *RFC2136) Apply(ctx context.Context, c Change) error {
	name, ownerName := dns.Fqdn(c.Name), dns.Fqdn(OwnerName(c.Name))
	hdr := func(n string, t uint16) dns.RR_Header {
		return dns.RR_Header{Name: n, Rrtype: t, Class: dns.ClassINET, Ttl: uint32(c.TTL / time.Second)}
	}
	txt := func(n string, strs ...string) *dns.TXT { return &dns.TXT{Hdr: hdr(n, dns.TypeTXT), Txt: strs} }
	owner := txt(ownerName, c.Owner)
	owner.Hdr.Ttl = uint32(max(c.TTL, time.Second) / time.Second)
	m := new(dns.Msg)
	m.SetUpdate(r.fqdn)
	switch {
	case c.Claim:
		// Nobody holds addresses or the ownership record there.
		m.RRsetNotUsed([]dns.RR{&dns.A{Hdr: hdr(name, dns.TypeA)}, &dns.AAAA{Hdr: hdr(name, dns.TypeAAAA)}, txt(ownerName)})
	case c.Legacy != nil:
		// The name's TXT records are as read (holding the in-name
		// ownership value), and nobody holds the ownership record.
		var prereq []dns.RR
		for i, v := range c.Legacy.Values {
			if i < len(c.Legacy.TXT) {
				prereq = append(prereq, txt(name, c.Legacy.TXT[i]...))
			} else {
				prereq = append(prereq, txt(name, chunks(v, 255)...))
			}
		}
		m.Used(prereq)
		m.RRsetNotUsed([]dns.RR{txt(ownerName)})
	default:
		// The ownership record's RRset is exactly this publisher's value.
		m.Used([]dns.RR{txt(ownerName, c.Owner)})
	}
	m.RemoveRRset([]dns.RR{&dns.A{Hdr: hdr(name, dns.TypeA)}, &dns.AAAA{Hdr: hdr(name, dns.TypeAAAA)}})
	if !c.Claim {
		// The in-name ownership record, if there (deleting an RR that
		// is not there does nothing).
		m.Remove([]dns.RR{txt(name, c.Owner)})
	}
	if c.Delete {
		m.Remove([]dns.RR{owner})
	} else {
		var add []dns.RR
		for _, ip := range c.Addrs {
			if ip.Is4() {
				add = append(add, &dns.A{Hdr: hdr(name, dns.TypeA), A: ip.AsSlice()})
			} else {
				add = append(add, &dns.AAAA{Hdr: hdr(name, dns.TypeAAAA), AAAA: ip.AsSlice()})
			}
		}
		add = append(add, owner)
		m.Insert(add)
	}
	m.SetTsig(r.key, r.alg, 300, time.Now().Unix())
	cl := &dns.Client{Net: "tcp", TsigSecret: r.secrets, Timeout: r.timeout}
	resp, _, err := cl.ExchangeContext(ctx, m, r.server)
	if err != nil {
		return fmt.Errorf("update at %s: %w%s", r.server, err, hint(err))
	}
	switch resp.Rcode {
	case dns.RcodeSuccess:
		return nil
	case dns.RcodeYXRrset, dns.RcodeNXRrset, dns.RcodeNameError, dns.RcodeYXDomain:
		return fmt.Errorf("%w (%s)", ErrConflict, dns.RcodeToString[resp.Rcode])
	}
	err = fmt.Errorf("update at %s: the server answered %s", r.server, dns.RcodeToString[resp.Rcode])
	return fmt.Errorf("%w%s", err, hint(err))
}

// chunks splits s into character-strings of at most n bytes.
func chunks(s string, n int) []string {
	var out []string
	for len(s) > n {
		out = append(out, s[:n])
		s = s[n:]
	}
	return append(out, s)
}
