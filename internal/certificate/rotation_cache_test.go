package certificate

import (
	"testing"
	"time"
)

// untilNextRotation answers from the cached earliest rotation as a scan
// of every service would, through new services, rotations (a replaced
// entry that was the earliest) and a sync that replaces the map.
func TestUntilNextRotationCache(t *testing.T) {
	clk := newClock()
	m := newTestManager(t, newHeldStore(), Options{Now: clk.Now})
	scan := func() time.Duration {
		m.mu.Lock()
		defer m.mu.Unlock()
		wait := time.Hour
		for _, s := range m.services {
			wait = min(wait, s.rec.rotateAt().Sub(clk.Now()))
		}
		return max(wait, 0)
	}
	// svc issued at issued, expiring after 3 x rotateIn: due in 2 x rotateIn.
	set := func(name string, rotateIn time.Duration) {
		now := clk.Now()
		m.mu.Lock()
		defer m.mu.Unlock()
		m.serviceSetLocked(&serviceState{rec: serviceRecord{CommonName: CommonName(name), Issued: now, Expires: now.Add(3 * rotateIn)}})
	}
	check := func(step string) {
		t.Helper()
		if got, want := m.untilNextRotation(), scan(); got != want {
			t.Errorf("%s: untilNextRotation %s, a scan says %s", step, got, want)
		}
	}
	check("no service")
	set("a", 20*time.Minute)
	check("a added")
	set("b", 10*time.Minute)
	check("b added, earlier")
	set("c", 25*time.Minute)
	check("c added, later")
	set("b", 40*time.Minute) // b rotated: a is the earliest again
	check("b replaced")
	clk.Advance(30 * time.Minute)
	check("time passed")
	m.mu.Lock()
	m.services = map[CommonName]*serviceState{}
	m.nextRotationKnown = false
	m.mu.Unlock()
	check("a sync found none")
}
