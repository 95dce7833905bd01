package dnspublish

import (
	"net/netip"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

func addrs(s ...string) []netip.Addr {
	var out []netip.Addr
	for _, a := range s {
		out = append(out, netip.MustParseAddr(a))
	}
	return out
}

func TestPlan(t *testing.T) {
	const zone, ttl = "example.test", time.Minute
	me, other := OwnerRecord("me"), OwnerRecord("other")
	spf := "v=spf1 -all"
	a := func(name string, v ...string) RecordSet {
		return RecordSet{Name: name, Type: TypeA, TTL: ttl, Values: v}
	}
	txt := func(name string, v ...string) RecordSet {
		return RecordSet{Name: name, Type: TypeTXT, TTL: ttl, Values: v}
	}
	for _, c := range []struct {
		name      string
		sets      []RecordSet
		desired   []netip.Addr // of n.example.test; nil: not wanted
		changes   []Change
		owned     bool
		conflicts int
	}{
		{name: "free: claimed", desired: addrs("10.0.0.1"),
			changes: []Change{{Claim: true, Addrs: addrs("10.0.0.1"), TTL: ttl}}, owned: true},
		{name: "free with a foreign TXT: claimed", desired: addrs("10.0.0.1"),
			sets:    []RecordSet{txt("n.example.test", spf)},
			changes: []Change{{Claim: true, Addrs: addrs("10.0.0.1"), TTL: ttl}}, owned: true},
		{name: "mine: updated", desired: addrs("10.0.0.9", "2001:db8::1", "10.0.0.9"),
			sets:    []RecordSet{a("n.example.test", "10.0.0.1"), txt("n.example.test", spf), txt("_osm-vm-owner.n.example.test", me)},
			changes: []Change{{Addrs: addrs("10.0.0.9", "2001:db8::1"), TTL: ttl}}, owned: true},
		{name: "mine, as wanted: nothing", desired: addrs("10.0.0.1"),
			sets:  []RecordSet{a("n.example.test", "10.0.0.1"), txt("n.example.test", spf), txt("_osm-vm-owner.n.example.test", me)},
			owned: true},
		{name: "mine, not wanted: deleted",
			sets:    []RecordSet{a("n.example.test", "10.0.0.1"), txt("n.example.test", spf), txt("_osm-vm-owner.n.example.test", me)},
			changes: []Change{{Delete: true}}, owned: true},
		{name: "mine with a stray in-name record: cleaned up", desired: addrs("10.0.0.1"),
			sets:    []RecordSet{a("n.example.test", "10.0.0.1"), txt("n.example.test", spf, me), txt("_osm-vm-owner.n.example.test", me)},
			changes: []Change{{Addrs: addrs("10.0.0.1"), TTL: ttl}}, owned: true},
		{name: "in-name record with a foreign TXT: adopted", desired: addrs("10.0.0.2"),
			sets:    []RecordSet{a("n.example.test", "10.0.0.1"), txt("n.example.test", me, spf)},
			changes: []Change{{Legacy: &RecordSet{Name: "n.example.test", Type: TypeTXT, TTL: ttl, Values: []string{me, spf}}, Addrs: addrs("10.0.0.2"), TTL: ttl}}, owned: true},
		{name: "in-name record, as wanted: adopted all the same", desired: addrs("10.0.0.1"),
			sets:    []RecordSet{a("n.example.test", "10.0.0.1"), txt("n.example.test", me)},
			changes: []Change{{Legacy: &RecordSet{Name: "n.example.test", Type: TypeTXT, TTL: ttl, Values: []string{me}}, Addrs: addrs("10.0.0.1"), TTL: ttl}}, owned: true},
		{name: "in-name record, not wanted: deleted",
			sets:    []RecordSet{a("n.example.test", "10.0.0.1"), txt("n.example.test", spf, me)},
			changes: []Change{{Legacy: &RecordSet{Name: "n.example.test", Type: TypeTXT, TTL: ttl, Values: []string{spf, me}}, Delete: true}}, owned: true},
		{name: "another osm-vm's: left alone", desired: addrs("10.0.0.1"),
			sets:      []RecordSet{txt("_osm-vm-owner.n.example.test", other)},
			conflicts: 1},
		{name: "another osm-vm's in-name: left alone", desired: addrs("10.0.0.1"),
			sets:      []RecordSet{a("n.example.test", "10.0.0.1"), txt("n.example.test", other, spf)},
			conflicts: 1},
		{name: "ownership record with a value beside mine: left alone", desired: addrs("10.0.0.1"),
			sets:      []RecordSet{a("n.example.test", "10.0.0.1"), txt("_osm-vm-owner.n.example.test", me, spf)},
			conflicts: 1},
		{name: "ownership record with a value beside mine, not wanted: left alone",
			sets: []RecordSet{a("n.example.test", "10.0.0.1"), txt("_osm-vm-owner.n.example.test", me, spf)}},
		{name: "someone's addresses: left alone", desired: addrs("10.0.0.1"),
			sets:      []RecordSet{a("n.example.test", "192.0.2.1"), txt("n.example.test", spf)},
			conflicts: 1},
	} {
		t.Run(c.name, func(t *testing.T) {
			desired := map[string][]netip.Addr{"empty.example.test": nil}
			if c.desired != nil {
				desired["n.example.test"] = c.desired
			}
			for i := range c.changes {
				c.changes[i].Name, c.changes[i].Owner = "n.example.test", me
			}
			changes, owned, conflicts := Plan(zone, me, ttl, c.sets, desired)
			if d := cmp.Diff(c.changes, changes, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
				t.Errorf("changes (-want +got):\n%s", d)
			}
			var wantOwned []string
			if c.owned {
				wantOwned = []string{"n.example.test"}
			}
			if d := cmp.Diff(wantOwned, owned); d != "" {
				t.Errorf("owned (-want +got):\n%s", d)
			}
			if len(conflicts) != c.conflicts {
				t.Errorf("conflicts = %q, want %d", conflicts, c.conflicts)
			}
		})
	}
}

func TestPlanNamesThatCannotBePublished(t *testing.T) {
	long := "a"
	for len(OwnerName(long+".example.test")) <= 253 {
		long += "a"
		if len(long)%60 == 0 {
			long += "."
		}
	}
	desired := map[string][]netip.Addr{
		"x.example.org":                addrs("10.0.0.1"),
		"_osm-vm-owner.n.example.test": addrs("10.0.0.2"),
		long + ".example.test":         addrs("10.0.0.3"),
		"example.test":                 addrs("10.0.0.4"),
	}
	changes, owned, conflicts := Plan("example.test", OwnerRecord("me"), time.Minute, nil, desired)
	if len(changes) != 1 || changes[0].Name != "example.test" || !changes[0].Claim {
		t.Errorf("changes = %v, want the apex claimed (its ownership record is _osm-vm-owner.example.test)", changes)
	}
	if d := cmp.Diff([]string{"example.test"}, owned); d != "" {
		t.Errorf("owned (-want +got):\n%s", d)
	}
	if len(conflicts) != 3 {
		t.Errorf("conflicts = %q, want outside the zone, an ownership record's name and too long", conflicts)
	}
}
