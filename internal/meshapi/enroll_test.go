package meshapi

import (
	"strings"
	"testing"
)

func TestParseCAHash(t *testing.T) {
	hex64 := strings.Repeat("ab", 32)
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"sha256:" + hex64, "sha256:" + hex64, true},
		{"SHA256:" + strings.ToUpper(hex64), "sha256:" + hex64, true},
		{hex64, "", false},
		{"sha256:" + hex64[:10], "", false},
		{"sha1:" + hex64, "", false},
		{"sha256:" + strings.Repeat("zz", 32), "", false},
	} {
		got, err := ParseCAHash(tc.in)
		if (err == nil) != tc.ok || got != tc.want {
			t.Errorf("ParseCAHash(%q) = %q, %v; want %q, ok %v", tc.in, got, err, tc.want, tc.ok)
		}
		if err != nil && !strings.Contains(err.Error(), "--ca-cert-hash") {
			t.Errorf("ParseCAHash(%q) error %q does not name the flag", tc.in, err)
		}
	}
}
