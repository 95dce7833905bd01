// Package testwait waits in tests for a condition to hold. It is test
// support: only _test.go files and other test-support packages import it.
//
// A wait is bounded by the test run's own deadline (go test -timeout), not
// by a few seconds picked by the test's author: on a loaded machine (CI
// on two cores beside other builds) the code under test may take many
// times longer than usual without being wrong, and a test that fails
// because the machine is busy is a defect. A condition that never holds
// still fails the test, with its own message, before -timeout's panic.
package testwait

import (
	"testing"
	"time"
)

const (
	// longest bounds a wait when the test binary has no deadline
	// (-timeout 0, or a benchmark), and caps it when the deadline is far
	// away, so that a condition that never holds is reported within
	// minutes rather than at the end of a long -timeout.
	longest = 5 * time.Minute

	// firstPoll and lastPoll bound the pause between two polls: it starts
	// short, so that a condition that holds almost at once costs almost
	// nothing, and doubles up to lastPoll, so that a slow one (an HTTP
	// request, a store read) is not polled in a busy loop on a machine
	// that is already loaded.
	firstPoll = time.Millisecond
	lastPoll  = 25 * time.Millisecond
)

// Bound is how long t may wait for something that should happen: 90% of
// the time left before the test binary's deadline, so that the test's own
// failure, not -timeout's panic, is what is reported; at most longest,
// and longest when there is no deadline; zero once the deadline has
// passed. A test that waits on a channel uses it as its bound:
// case <-time.After(testwait.Bound(t)).
func Bound(t testing.TB) time.Duration {
	d, ok := t.(interface{ Deadline() (time.Time, bool) })
	if !ok {
		return longest
	}
	deadline, ok := d.Deadline()
	if !ok {
		return longest
	}
	return max(0, min(time.Until(deadline)*9/10, longest))
}

// For polls cond until it holds, and fails t with what if it does not
// hold within Bound(t).
func For(t testing.TB, what string, cond func() bool) {
	t.Helper()
	bound := Bound(t)
	if ok, _ := poll(bound, func() (bool, string) { return cond(), "" }); !ok {
		t.Fatalf("%s: not within %v", what, bound.Round(time.Millisecond))
	}
}

// Until polls cond until it holds, and fails t with what and cond's last
// complaint if it does not hold within Bound(t).
func Until(t testing.TB, what string, cond func() (ok bool, last string)) {
	t.Helper()
	bound := Bound(t)
	if ok, last := poll(bound, cond); !ok {
		t.Fatalf("%s: not within %v: %s", what, bound.Round(time.Millisecond), last)
	}
}

// poll calls cond until it holds or bound has passed, and returns its last
// result. cond is called once more after the bound, so that a condition
// that holds by then counts.
func poll(bound time.Duration, cond func() (bool, string)) (bool, string) {
	deadline := time.Now().Add(bound)
	pause := firstPoll
	for {
		ok, last := cond()
		if ok || time.Now().After(deadline) {
			return ok, last
		}
		time.Sleep(pause)
		pause = min(2*pause, lastPoll)
	}
}
