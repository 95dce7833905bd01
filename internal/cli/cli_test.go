package cli

import (
	"bytes"
	"strings"
	"testing"
)

func TestNewLogger(t *testing.T) {
	for _, tc := range []struct {
		format, level, wantErr, wantOut string
	}{
		{"text", "info", "", "level=INFO msg=hello"},
		{"json", "debug", "", `"msg":"hello"`},
		{"xml", "info", "--log-format", ""},
		{"text", "loud", "--log-level", ""},
	} {
		var b bytes.Buffer
		log, err := NewLogger(&b, tc.format, tc.level)
		if tc.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
				t.Errorf("NewLogger(%q, %q) error %v, want one naming %s", tc.format, tc.level, err, tc.wantErr)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		log.Info("hello")
		if !strings.Contains(b.String(), tc.wantOut) {
			t.Errorf("NewLogger(%q, %q) wrote %q, want %q in it", tc.format, tc.level, b.String(), tc.wantOut)
		}
	}
}

func TestVersion(t *testing.T) {
	if got := Version("v1.2.3"); got != "v1.2.3" {
		t.Errorf("Version(v1.2.3) = %q", got)
	}
	if got := Version(""); got == "" {
		t.Error("Version(\"\") is empty, want the module version or dev")
	}
}
