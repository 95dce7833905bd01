package api

import (
	"strings"
	"testing"
	"unicode/utf8"
)

// TestTruncate: what an agent reports is cut to a bound on a rune
// boundary, marked as cut.
func TestTruncate(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{
		{"short", 10, "short"},
		{"exactly", 7, "exactly"},
		{"longer than that", 6, "longer…"},
		{"héllo", 2, "h…"}, // é is two bytes: not split
	} {
		if got := truncate(tc.in, tc.n); got != tc.want {
			t.Errorf("truncate(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
	if got := truncate(strings.Repeat("é", 5000), 2048); !utf8.ValidString(got) || len(got) > 2048+len("…") {
		t.Errorf("truncate of a long report: %d bytes, valid UTF-8 %v", len(got), utf8.ValidString(got))
	}
}
