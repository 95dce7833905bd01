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
	sets := []RecordSet{
		{Name: "mine.example.test", Type: TypeA, TTL: ttl, Values: []string{"10.0.0.1"}},
		{Name: "mine.example.test", Type: TypeTXT, Values: []string{me, "v=spf1 -all"}},
		{Name: "same.example.test", Type: TypeA, TTL: ttl, Values: []string{"10.0.0.2"}},
		{Name: "same.example.test", Type: TypeTXT, Values: []string{me}},
		{Name: "gone.example.test", Type: TypeA, TTL: ttl, Values: []string{"10.0.0.3"}},
		{Name: "gone.example.test", Type: TypeTXT, Values: []string{me}},
		{Name: "theirs.example.test", Type: TypeTXT, Values: []string{other}},
		{Name: "www.example.test", Type: TypeA, TTL: ttl, Values: []string{"192.0.2.1"}},
	}
	desired := map[string][]netip.Addr{
		"mine.example.test":   addrs("10.0.0.9", "2001:db8::1", "10.0.0.9"),
		"same.example.test":   addrs("10.0.0.2"),
		"new.example.test":    addrs("10.0.0.4"),
		"theirs.example.test": addrs("10.0.0.5"),
		"www.example.test":    addrs("10.0.0.6"),
		"empty.example.test":  nil,
		"x.example.org":       addrs("10.0.0.7"),
	}
	changes, owned, conflicts := Plan(zone, me, ttl, sets, desired)
	wantChanges := []Change{
		{Name: "mine.example.test", Owner: me, Addrs: addrs("10.0.0.9", "2001:db8::1"), TTL: ttl},
		{Name: "new.example.test", Owner: me, Claim: true, Addrs: addrs("10.0.0.4"), TTL: ttl},
		{Name: "gone.example.test", Owner: me, Delete: true},
	}
	if d := cmp.Diff(wantChanges, changes, cmp.Comparer(func(a, b netip.Addr) bool { return a == b })); d != "" {
		t.Errorf("changes (-want +got):\n%s", d)
	}
	if d := cmp.Diff([]string{"mine.example.test", "new.example.test", "same.example.test", "gone.example.test"}, owned); d != "" {
		t.Errorf("owned (-want +got):\n%s", d)
	}
	if len(conflicts) != 3 {
		t.Errorf("conflicts = %q, want theirs, www and x.example.org", conflicts)
	}
}
