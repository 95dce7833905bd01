package clip

import (
	"strings"
	"testing"
	"unicode/utf8"
)

func TestString(t *testing.T) {
	tests := []struct {
		name string
		s    string
		max  int
		want string
	}{
		{name: "short", s: "bad listener", max: 64, want: "bad listener"},
		{name: "exactly max", s: "abcd", max: 4, want: "abcd"},
		{name: "ASCII", s: strings.Repeat("a", 100), max: 40, want: strings.Repeat("a", 20) + " ... [80 bytes cut]"},
		// "é" is two bytes: 21 would split the eleventh, so 20 are kept.
		{name: "on a rune boundary", s: strings.Repeat("é", 50), max: 40, want: strings.Repeat("é", 10) + " ... [80 bytes cut]"},
		{name: "max below the marker", s: strings.Repeat("a", 100), max: 5, want: " ... [100 bytes cut]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			got := String(tc.s, tc.max)
			if got != tc.want {
				t.Errorf("String(%d bytes, %d) = %q, want %q", len(tc.s), tc.max, got, tc.want)
			}
			if !utf8.ValidString(got) {
				t.Errorf("String(%d bytes, %d) = %q: not valid UTF-8", len(tc.s), tc.max, got)
			}
		})
	}
}

func TestStringStaysWithinMax(t *testing.T) {
	s := strings.Repeat("x€", 1<<20) // 4 MiB: a seven-digit count
	for _, max := range []int{32, 1000, 1024, 2048, 4096} {
		if got := String(s, max); len(got) > max || !utf8.ValidString(got) {
			t.Errorf("String(4 MiB, %d): %d bytes, valid UTF-8 %t; want at most %d, valid", max, len(got), utf8.ValidString(got), max)
		}
	}
}
