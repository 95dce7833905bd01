package main

import (
	"testing"
	"time"
)

func TestNextIndex(t *testing.T) {
	for _, tc := range []struct {
		name      string
		prev, got uint64
		want      step
	}{
		{"first read", 0, 42, step{next: 42, apply: true}},
		{"a change", 42, 50, step{next: 50, apply: true}},
		{"the wait ended with nothing new", 50, 50, step{next: 50}},
		{"backwards: reset to a plain read", 50, 7, step{next: 0, apply: true, reset: true}},
		{"zero is never waited on", 0, 0, step{next: 1, apply: true}},
		{"zero after a real index is a reset", 50, 0, step{next: 0, apply: true, reset: true}},
	} {
		if got := nextIndex(tc.prev, tc.got); got != tc.want {
			t.Errorf("%s: nextIndex(%d, %d) = %+v; want %+v", tc.name, tc.prev, tc.got, got, tc.want)
		}
	}
}

func TestBackoff(t *testing.T) {
	p := pacing{backoffMin: 250 * time.Millisecond, backoffMax: 30 * time.Second}
	for _, tc := range []struct {
		failures int
		base     time.Duration
	}{{1, 250 * time.Millisecond}, {2, 500 * time.Millisecond}, {5, 4 * time.Second}, {20, 30 * time.Second}} {
		got := p.backoff(tc.failures)
		if got < tc.base || got > tc.base+tc.base/4 {
			t.Errorf("backoff(%d) = %v; want %v plus at most 25%% jitter", tc.failures, got, tc.base)
		}
	}
}
