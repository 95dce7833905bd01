package testwait

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// fakeT records Fatalf instead of ending the test, so that the failing path
// runs inside a passing test, and has the deadline the test gives it.
type fakeT struct {
	testing.TB
	deadline time.Time
	fatal    string
}

func (f *fakeT) Helper() {}

func (f *fakeT) Fatalf(format string, args ...any) { f.fatal = fmt.Sprintf(format, args...) }

func (f *fakeT) Deadline() (time.Time, bool) { return f.deadline, !f.deadline.IsZero() }

// noDeadlineT is a testing.TB without Deadline, as *testing.B is.
type noDeadlineT struct{ testing.TB }

func TestForWaitsUntilTheConditionHolds(t *testing.T) {
	f := &fakeT{TB: t, deadline: time.Now().Add(time.Hour)}
	polls := 0
	For(f, "the third poll", func() bool { polls++; return polls == 3 })
	if f.fatal != "" {
		t.Errorf("For failed: %s", f.fatal)
	}
	if polls != 3 {
		t.Errorf("cond called %d times, want 3: For returns once it holds", polls)
	}
}

func TestForFailsWhenTheConditionNeverHolds(t *testing.T) {
	f := &fakeT{TB: t, deadline: time.Now().Add(200 * time.Millisecond)}
	start := time.Now()
	For(f, "the impossible", func() bool { return false })
	if !strings.HasPrefix(f.fatal, "the impossible: not within ") {
		t.Errorf("Fatalf(%q), want it to name the condition and the bound", f.fatal)
	}
	if waited := time.Since(start); waited < 100*time.Millisecond {
		t.Errorf("gave up after %v, want 90%% of the 200ms left", waited)
	}
}

func TestUntilReportsTheLastComplaint(t *testing.T) {
	f := &fakeT{TB: t, deadline: time.Now().Add(100 * time.Millisecond)}
	n := 0
	Until(f, "four replicas", func() (bool, string) { n++; return false, fmt.Sprintf("poll %d: 3 replicas", n) })
	if want := fmt.Sprintf(": poll %d: 3 replicas", n); !strings.HasPrefix(f.fatal, "four replicas: not within ") || !strings.HasSuffix(f.fatal, want) {
		t.Errorf("Fatalf(%q), want the condition, the bound and the last complaint %q", f.fatal, want)
	}
}

// A condition that holds by the poll after the bound passed counts: the
// wait does not fail for want of one more look.
func TestConditionHoldingAtTheBoundPasses(t *testing.T) {
	f := &fakeT{TB: t, deadline: time.Now().Add(100 * time.Millisecond)}
	end := time.Now().Add(Bound(f))
	Until(f, "the bound passed", func() (bool, string) { return time.Now().After(end), "not yet" })
	if f.fatal != "" {
		t.Errorf("Until failed: %s", f.fatal)
	}
}

func TestBound(t *testing.T) {
	for _, tc := range []struct {
		name     string
		t        testing.TB
		min, max time.Duration
	}{
		// Test code runs between the fake's deadline and Bound; a loaded
		// machine may take seconds over it, hence the wide windows.
		{"90% of the time left", &fakeT{TB: t, deadline: time.Now().Add(100 * time.Second)}, 60 * time.Second, 90 * time.Second},
		{"capped when the deadline is far", &fakeT{TB: t, deadline: time.Now().Add(time.Hour)}, longest, longest},
		{"no deadline", &fakeT{TB: t}, longest, longest},
		{"no Deadline method", noDeadlineT{t}, longest, longest},
		{"deadline passed", &fakeT{TB: t, deadline: time.Now().Add(-time.Second)}, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Bound(tc.t); got < tc.min || got > tc.max {
				t.Errorf("Bound = %v, want between %v and %v", got, tc.min, tc.max)
			}
		})
	}
}
