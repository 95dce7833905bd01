// Package dnspublish keeps host names published at the operator's DNS
// servers: for each name a [Source] lists, A and AAAA records holding the
// addresses behind it, and nothing else in the zone touched.
//
// A [Publisher] reads what the zone holds through a [Provider] (one DNS
// service's API: [RFC2136] speaks dynamic updates with TSIG to any
// authoritative server; cloud DNS APIs can follow as other Providers),
// plans the changes, and makes them one name at a time. It owns a name
// only when it holds the name's ownership record, a TXT record
// "heritage=osm-vm,osm-vm/owner=<owner id>" beside the addresses (the
// registry external-dns keeps): it claims a name only when nobody holds
// addresses or another owner's record there, changes and deletes only the
// names it owns, and every change carries the ownership as a prerequisite,
// so a name taken meanwhile is left alone. A DNS server that refuses
// (bad TSIG, REFUSED, unreachable) makes the publisher unhealthy with the
// cause; it retries with backoff and never blocks anything else.
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

// RecordSet is the records of one type at one name, as a Provider reads
// them. Names are fully qualified, lower case, without the final dot.
type RecordSet struct {
	Name   string
	Type   string
	TTL    time.Duration
	Values []string
}

// Change is what a Provider makes of one name, atomically, and only if the
// name is still as the publisher saw it (see [ErrConflict]).
type Change struct {
	Name string
	// Owner is the ownership record's value (OwnerRecord).
	Owner string
	// Claim: the name is not owned yet; it must hold no A, AAAA and no
	// ownership record of osm-vm. Otherwise the name must hold Owner.
	Claim bool
	// Delete removes the name's A and AAAA records and Owner; otherwise
	// its A and AAAA records become Addrs with TTL.
	Delete bool
	Addrs  []netip.Addr
	TTL    time.Duration
}

func (c Change) String() string {
	switch {
	case c.Delete:
		return "delete " + c.Name
	case c.Claim:
		return fmt.Sprintf("create %s %v", c.Name, c.Addrs)
	}
	return fmt.Sprintf("update %s %v", c.Name, c.Addrs)
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
// returns the first error that makes the publisher unhealthy (conflicts
// over single names do not).
func (p *Publisher) Sync(ctx context.Context) error {
	start := time.Now()
	desired := p.src.Names()
	sets, err := p.provider.Records(ctx)
	var owned, conflicts []string
	if err == nil {
		var changes []Change
		changes, owned, conflicts = Plan(p.provider.Zone(), OwnerRecord(p.opts.Owner), p.opts.TTL, sets, desired)
		var errs []error
		for _, c := range changes {
			switch err := p.provider.Apply(ctx, c); {
			case errors.Is(err, ErrConflict):
				conflicts = append(conflicts, fmt.Sprintf("%s: %v (tried to %s; next pass reads it again)", c.Name, err, c))
				owned = slices.DeleteFunc(owned, func(n string) bool { return n == c.Name && !c.Delete })
			case err != nil:
				errs = append(errs, fmt.Errorf("%s: %w", c, err))
			default:
				p.log.Info("DNS record changed", "change", c.String())
				p.metrics.changes.Inc()
				if c.Delete {
					owned = slices.DeleteFunc(owned, func(n string) bool { return n == c.Name })
				}
			}
		}
		err = errors.Join(errs...)
	}
	if err != nil && ctx.Err() == nil {
		err = fmt.Errorf("%s DNS zone %s: %w", p.kind, p.provider.Zone(), err)
	}
	p.record(err, sets != nil, owned, conflicts, start)
	return err
}

// record updates the status after a pass; read says whether the zone was
// read (otherwise the last known ownership stays).
func (p *Publisher) record(err error, read bool, owned, conflicts []string, at time.Time) {
	slices.Sort(owned)
	slices.Sort(conflicts)
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
	p.metrics.owned.Set(float64(len(owned)))
	p.metrics.conflicts.Set(float64(len(conflicts)))
}

// Plan returns the changes that make zone hold desired, given what the
// zone holds (sets) and this publisher's ownership record value; with the
// names owned (before the changes, less those it deletes; plus those it
// claims) and the names it leaves alone because someone else holds them.
func Plan(zone, owner string, ttl time.Duration, sets []RecordSet, desired map[string][]netip.Addr) (changes []Change, owned, conflicts []string) {
	type name struct {
		addrs  []netip.Addr
		ttl    time.Duration
		owners []string // osm-vm ownership values
		other  bool     // A/AAAA present
	}
	names := map[string]*name{}
	at := func(n string) *name {
		if names[n] == nil {
			names[n] = &name{}
		}
		return names[n]
	}
	for _, s := range sets {
		n := at(strings.ToLower(s.Name))
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
			for _, v := range s.Values {
				if strings.HasPrefix(v, Heritage+",") {
					n.owners = append(n.owners, v)
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
		n := at(nm)
		switch {
		case slices.Contains(n.owners, owner):
			owned = append(owned, nm)
			if !slices.Equal(normalize(n.addrs), want) || n.ttl != ttl {
				changes = append(changes, Change{Name: nm, Owner: owner, Addrs: want, TTL: ttl})
			}
		case len(n.owners) > 0:
			conflicts = append(conflicts, fmt.Sprintf("%s: owned by another osm-vm (%s)", nm, strings.Join(n.owners, "; ")))
		case n.other:
			conflicts = append(conflicts, fmt.Sprintf("%s: holds addresses osm-vm does not own (%s)", nm, joinAddrs(n.addrs)))
		default:
			owned = append(owned, nm)
			changes = append(changes, Change{Name: nm, Owner: owner, Claim: true, Addrs: want, TTL: ttl})
		}
	}
	for _, nm := range slices.Sorted(maps.Keys(names)) {
		if len(normalize(desired[nm])) == 0 && slices.Contains(names[nm].owners, owner) {
			owned = append(owned, nm)
			changes = append(changes, Change{Name: nm, Owner: owner, Delete: true})
		}
	}
	return changes, owned, conflicts
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
