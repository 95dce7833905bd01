// Package dnspublish keeps host names published at the operator's DNS
// servers: for each name a [Source] lists, A and AAAA records holding the
// addresses behind it, and nothing else in the zone touched.
//
// A [Publisher] reads what the zone holds through a [Provider] (one DNS
// service's API: [RFC2136] speaks dynamic updates with TSIG to any
// authoritative server; cloud DNS APIs can follow as other Providers),
// plans the changes, and makes them one name at a time. It owns a name
// only when it holds the name's ownership record: the TXT record
// "heritage=osm-vm,osm-vm/owner=<owner id>" at a name of its own,
// "_osm-vm-owner.<name>" ([OwnerName]; the registry external-dns keeps,
// under its own name as external-dns's newer formats do), which only
// osm-vm writes. It claims a name only when nobody holds addresses or an
// ownership record there, changes and deletes only the names it owns,
// and every change carries the ownership as a prerequisite on the
// ownership record's RRset, so a name taken meanwhile is left alone,
// whatever other TXT records (SPF, domain verification) the name holds:
// those it never touches. A name still owned through the older in-name
// record (the ownership value among the name's own TXT records) is
// adopted: one atomic update moves the record to its own name.
//
// A DNS server that refuses (bad TSIG, REFUSED, unreachable), or a change
// whose prerequisite fails, makes the publisher unhealthy with the cause;
// it retries with backoff and never blocks anything else.
//
// It imports internal/catalog and internal/spec only for [ViewSource];
// nothing of xDS, the store or the API.
package dnspublish

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"
)

// Record types the publisher reads and writes.
const (
	TypeA    = "A"
	TypeAAAA = "AAAA"
	TypeTXT  = "TXT"
)

// Heritage starts every ownership record's value.
const Heritage = "heritage=osm-vm"

// OwnerRecord is the TXT value that marks a name as owned by owner.
func OwnerRecord(owner string) string { return Heritage + ",osm-vm/owner=" + owner }

// OwnerLabel is the label that, before a published name, names the name's
// ownership record. It starts with an underscore (RFC 8552), so it is
// never a host name, and it lies under the name, so the zone's apex has
// one too.
const OwnerLabel = "_osm-vm-owner"

// OwnerName is the name of the TXT record that holds name's ownership.
func OwnerName(name string) string { return OwnerLabel + "." + name }

// ownerOf returns the published name whose ownership record is at n.
func ownerOf(n string) (string, bool) { return strings.CutPrefix(n, OwnerLabel+".") }

// RecordSet is the records of one type at one name, as a Provider reads
// them. Names are fully qualified, lower case, without the final dot.
type RecordSet struct {
	Name string
	Type string
	TTL  time.Duration
	// Values holds each record's value (a TXT record's character-strings
	// joined).
	Values []string
	// TXT holds, for a TXT record set, each record's character-strings as
	// stored, in the order of Values, where the DNS service keeps them
	// apart (RFC 2136 does); nil otherwise.
	TXT [][]string
}

// Change is what a Provider makes of one name, atomically, and only if the
// name is still as the publisher saw it (see [ErrConflict]). It never
// changes a TXT record at Name other than Owner.
type Change struct {
	Name string
	// Owner is the ownership record's value (OwnerRecord).
	Owner string
	// The prerequisite, one of three:
	//   - Claim: the name is not owned yet; Name must hold no A and no
	//     AAAA record, and OwnerName(Name) no TXT record;
	//   - Legacy set: the name is owned through the older in-name record
	//     (Owner among Name's own TXT records); Name's TXT record set must
	//     be exactly Legacy (as read) and OwnerName(Name) hold no TXT
	//     record;
	//   - otherwise: the TXT record set at OwnerName(Name) must be exactly
	//     Owner.
	Claim  bool
	Legacy *RecordSet
	// Delete removes the name's A and AAAA records and its ownership
	// record; otherwise its A and AAAA records become Addrs with TTL and
	// its ownership record is at OwnerName(Name). Every change other than
	// a claim also removes Owner from Name's own TXT records (the older
	// in-name record) if it is there.
	Delete bool
	Addrs  []netip.Addr
	TTL    time.Duration
}

func (c Change) String() string {
	var s string
	switch {
	case c.Delete:
		s = "delete " + c.Name
	case c.Claim:
		s = fmt.Sprintf("create %s %v", c.Name, c.Addrs)
	default:
		s = fmt.Sprintf("update %s %v", c.Name, c.Addrs)
	}
	if c.Legacy != nil {
		s += " (adopting its in-name ownership record)"
	}
	return s
}

// ErrConflict is wrapped by a Provider's Apply error when the name was not
// as the change requires (someone else took it, or changed it meanwhile).
var ErrConflict = errors.New("the name changed at the DNS server")

// Provider is one DNS service's API.
type Provider interface {
	// Zone is the zone the Provider changes (lower case, no final dot).
	Zone() string
	// Records returns the A, AAAA and TXT record sets of the zone.
	Records(ctx context.Context) ([]RecordSet, error)
	// Apply makes one change, atomically, or returns an error (wrapping
	// ErrConflict when the name was not as the change requires).
	Apply(ctx context.Context, c Change) error
}

// Source lists the names to publish.
type Source interface {
	// Names returns each host name to publish (lower case, no final dot)
	// with the addresses behind it; a name without addresses is not
	// published.
	Names() map[string][]netip.Addr
	// Subscribe signals, coalescing, when Names may have changed.
	Subscribe() (notify <-chan struct{}, cancel func())
}

// Options tune a Publisher.
type Options struct {
	// Owner names this mesh in the ownership records (required).
	Owner string
	// TTL of the A and AAAA records (default 60s).
	TTL time.Duration
	// Resync is how often the zone is read again when nothing changed, to
	// heal changes made behind the publisher's back (default 1m).
	Resync time.Duration
	// MinBackoff and MaxBackoff bound the retries after a failure
	// (defaults 1s and 1m).
	MinBackoff, MaxBackoff time.Duration
}

// Status is the publisher's health, provider-status style.
type Status struct {
	Provider string `json:"provider"`
	Zone     string `json:"zone"`
	Healthy  bool   `json:"healthy"`
	// Error is the cause while unhealthy.
	Error string `json:"error,omitempty"`
	// Since is when the current health began.
	Since time.Time `json:"since"`
	// LastSync is when the zone last matched the source.
	LastSync time.Time `json:"lastSync,omitzero"`
	// Owned lists the names this publisher owns, sorted.
	Owned []string `json:"owned"`
	// Conflicts lists the names the source wants that someone else holds
	// (or that lie outside the zone), each with why, sorted.
	Conflicts []string `json:"conflicts,omitempty"`
	// Failed lists the names whose change the DNS server did not make in
	// the last pass, each with the change and the cause, sorted; while it
	// is not empty the publisher is unhealthy.
	Failed []string `json:"failed,omitempty"`
}

// Publisher keeps a Source's names published through a Provider.
type Publisher struct {
	log      *slog.Logger
	provider Provider
	kind     string
	src      Source
	opts     Options
	metrics  *metrics

	mu     sync.Mutex
	status Status
}

// New returns a Publisher; kind names the Provider in its status ("rfc2136").
func New(log *slog.Logger, kind string, p Provider, src Source, opts Options) (*Publisher, error) {
	if opts.Owner == "" {
		return nil, errors.New("dns publisher: empty owner id: set dns.ownerID to a name unique to this mesh")
	}
	opts.TTL = cmp.Or(opts.TTL, 60*time.Second)
	opts.Resync = cmp.Or(opts.Resync, time.Minute)
	opts.MinBackoff = cmp.Or(opts.MinBackoff, time.Second)
	opts.MaxBackoff = max(cmp.Or(opts.MaxBackoff, time.Minute), opts.MinBackoff)
	return &Publisher{log: log, provider: p, kind: kind, src: src, opts: opts, metrics: newMetrics(),
		status: Status{Provider: kind, Zone: p.Zone(), Healthy: false, Error: "not synced yet", Since: time.Now(), Owned: []string{}}}, nil
}

// Status returns the current status.
func (p *Publisher) Status() Status {
	p.mu.Lock()
	defer p.mu.Unlock()
	s := p.status
	s.Owned = slices.Clone(s.Owned)
	s.Conflicts = slices.Clone(s.Conflicts)
	s.Failed = slices.Clone(s.Failed)
	return s
}

// Run publishes until ctx ends: at start, whenever the source changes,
// every Resync, and after a failure with backoff. It returns nil when ctx
// is cancelled; a failing DNS server never ends it.
func (p *Publisher) Run(ctx context.Context) error {
	notify, cancel := p.src.Subscribe()
	defer cancel()
	var backoff time.Duration
	timer := time.NewTimer(0)
	defer timer.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-notify:
		case <-timer.C:
		}
		err := p.Sync(ctx)
		if ctx.Err() != nil {
			return nil
		}
		next := p.opts.Resync
		if err != nil {
			backoff = min(max(2*backoff, p.opts.MinBackoff), p.opts.MaxBackoff)
			next = backoff
		} else {
			backoff = 0
		}
		if !timer.Stop() {
			select {
			case <-timer.C:
			default:
			}
		}
		timer.Reset(next)
	}
}

// Sync makes one pass: reads the zone, plans and applies the changes. It
// returns an error, which makes the publisher unhealthy, when the zone
// could not be read or a change was not made (refused, or its
// prerequisite failed because the name changed since the read); names the
// plan leaves alone because someone else holds them do not.
func (p *Publisher) Sync(ctx context.Context) error {
	start := time.Now()
	desired := p.src.Names()
	sets, err := p.provider.Records(ctx)
	read := err == nil
	var owned, conflicts, failed []string
	if read {
		var changes []Change
		changes, owned, conflicts = Plan(p.provider.Zone(), OwnerRecord(p.opts.Owner), p.opts.TTL, sets, desired)
		var errs []error
		for _, c := range changes {
			err := p.provider.Apply(ctx, c)
			if err == nil {
				p.log.Info("DNS record changed", "change", c.String())
				p.metrics.changes.Inc()
				if c.Delete {
					owned = slices.DeleteFunc(owned, func(n string) bool { return n == c.Name })
				}
				continue
			}
			p.metrics.changeFailures.Inc()
			failed = append(failed, fmt.Sprintf("%s: %s: %v", c.Name, c, err))
			if errors.Is(err, ErrConflict) {
				// Whether the name is still this publisher's, the next
				// pass reads.
				owned = slices.DeleteFunc(owned, func(n string) bool { return n == c.Name && !c.Delete })
				err = fmt.Errorf("%w: the next pass reads the zone again", err)
			}
			errs = append(errs, fmt.Errorf("%s: %w", c, err))
		}
		err = errors.Join(errs...)
	}
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("%s DNS zone %s: %w", p.kind, p.provider.Zone(), err)
	}
	p.record(err, read, owned, conflicts, failed, start)
	return err
}

// record updates the status after a pass; read says whether the zone was
// read (otherwise the last known ownership stays).
func (p *Publisher) record(err error, read bool, owned, conflicts, failed []string, at time.Time) {
	slices.Sort(owned)
	slices.Sort(conflicts)
	slices.Sort(failed)
	p.mu.Lock()
	defer p.mu.Unlock()
	was := p.status
	s := &p.status
	switch {
	case err != nil:
		if was.Healthy || was.Error != err.Error() {
			p.log.Error("DNS publishing failed: the records stay as they were, retrying with backoff", "err", err)
		}
		if was.Healthy || s.Since.IsZero() {
			s.Since = at
		}
		s.Healthy, s.Error = false, err.Error()
		p.metrics.failures.Inc()
		p.metrics.healthy.Set(0)
		if !read {
			return
		}
	default:
		if !was.Healthy {
			s.Since = at
			if was.Error != "not synced yet" {
				p.log.Info("DNS publishing healthy again", "zone", s.Zone)
			}
		}
		s.Healthy, s.Error, s.LastSync = true, "", at
		p.metrics.healthy.Set(1)
	}
	s.Owned = append([]string{}, owned...)
	if !slices.Equal(conflicts, was.Conflicts) {
		for _, c := range conflicts {
			if !slices.Contains(was.Conflicts, c) {
				p.log.Warn("DNS name not published: it is held by someone else", "conflict", c)
			}
		}
	}
	s.Conflicts = conflicts
	s.Failed = failed
	p.metrics.failedNames.Set(float64(len(failed)))
	p.metrics.owned.Set(float64(len(owned)))
	p.metrics.conflicts.Set(float64(len(conflicts)))
}

// Plan returns the changes that make zone hold desired, given what the
// zone holds (sets) and this publisher's ownership record value; with the
// names owned (before the changes, plus those it claims; those it deletes
// are owned until the deletion is made) and the names it leaves alone
// because someone else holds them.
func Plan(zone, owner string, ttl time.Duration, sets []RecordSet, desired map[string][]netip.Addr) (changes []Change, owned, conflicts []string) {
	names := map[string]*zoneName{}
	at := func(n string) *zoneName {
		if names[n] == nil {
			names[n] = &zoneName{}
		}
		return names[n]
	}
	for _, s := range sets {
		nm := strings.ToLower(s.Name)
		if target, ok := ownerOf(nm); ok {
			if s.Type == TypeTXT {
				at(target).owners = append(at(target).owners, s.Values...)
			}
			continue
		}
		n := at(nm)
		switch s.Type {
		case TypeA, TypeAAAA:
			n.other = true
			n.ttl = s.TTL
			for _, v := range s.Values {
				if a, err := netip.ParseAddr(v); err == nil {
					n.addrs = append(n.addrs, a)
				}
			}
		case TypeTXT:
			n.txt = &s
			for _, v := range s.Values {
				if strings.HasPrefix(v, Heritage+",") {
					n.legacy = append(n.legacy, v)
				}
			}
		}
	}
	for _, nm := range slices.Sorted(maps.Keys(desired)) {
		want := normalize(desired[nm])
		if len(want) == 0 {
			continue
		}
		if nm != zone && !strings.HasSuffix(nm, "."+zone) {
			conflicts = append(conflicts, fmt.Sprintf("%s: not in zone %s", nm, zone))
			continue
		}
		if _, ok := ownerOf(nm); ok || len(OwnerName(nm)) > 253 {
			conflicts = append(conflicts, fmt.Sprintf("%s: cannot hold an ownership record at %s (a name of 253 characters at most, not itself an ownership record's)", nm, OwnerName(nm)))
			continue
		}
		n := at(nm)
		switch holder, why := n.holder(owner); holder {
		case heldByMe:
			owned = append(owned, nm)
			if !slices.Equal(normalize(n.addrs), want) || n.ttl != ttl || slices.Contains(n.legacy, owner) {
				changes = append(changes, Change{Name: nm, Owner: owner, Legacy: n.adopt(), Addrs: want, TTL: ttl})
			}
		case heldByOthers:
			conflicts = append(conflicts, fmt.Sprintf("%s: %s", nm, why))
		default:
			owned = append(owned, nm)
			changes = append(changes, Change{Name: nm, Owner: owner, Claim: true, Addrs: want, TTL: ttl})
		}
	}
	for _, nm := range slices.Sorted(maps.Keys(names)) {
		n := names[nm]
		if len(normalize(desired[nm])) == 0 {
			if holder, _ := n.holder(owner); holder == heldByMe {
				owned = append(owned, nm)
				changes = append(changes, Change{Name: nm, Owner: owner, Legacy: n.adopt(), Delete: true})
			}
		}
	}
	return changes, owned, conflicts
}

// zoneName is what Plan reads of one name.
type zoneName struct {
	addrs  []netip.Addr
	ttl    time.Duration
	other  bool       // A/AAAA present
	owners []string   // the TXT values of the ownership record's name
	txt    *RecordSet // the name's own TXT records
	legacy []string   // osm-vm ownership values among them (the older scheme)
}

type holder int

const (
	heldByNobody holder = iota
	heldByMe
	heldByOthers
)

// holder says who holds the name, given this publisher's ownership value,
// and why someone else does.
func (n *zoneName) holder(owner string) (holder, string) {
	switch {
	case slices.Equal(n.owners, []string{owner}):
		return heldByMe, ""
	case slices.Contains(n.owners, owner):
		return heldByOthers, fmt.Sprintf("its ownership record holds other values beside this mesh's (%s): remove them to let osm-vm change the name", strings.Join(n.owners, "; "))
	case len(n.owners) > 0:
		return heldByOthers, fmt.Sprintf("owned by another osm-vm (%s)", strings.Join(n.owners, "; "))
	case slices.Equal(n.legacy, []string{owner}):
		return heldByMe, ""
	case len(n.legacy) > 0:
		return heldByOthers, fmt.Sprintf("owned by another osm-vm (%s, in the name's own TXT records)", strings.Join(n.legacy, "; "))
	case n.other:
		return heldByOthers, fmt.Sprintf("holds addresses osm-vm does not own (%s)", joinAddrs(n.addrs))
	}
	return heldByNobody, ""
}

// adopt returns, for a name owned through the older in-name record only,
// its TXT record set (the prerequisite of the change that adopts it).
func (n *zoneName) adopt() *RecordSet {
	if len(n.owners) > 0 || n.legacy == nil {
		return nil
	}
	return n.txt
}

func normalize(addrs []netip.Addr) []netip.Addr {
	out := make([]netip.Addr, 0, len(addrs))
	for _, a := range addrs {
		if a.IsValid() {
			out = append(out, a.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return slices.Compact(out)
}

func joinAddrs(addrs []netip.Addr) string {
	s := make([]string, len(addrs))
	for i, a := range addrs {
		s[i] = a.String()
	}
	return strings.Join(s, ", ")
}
