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

func TestVersionCommand(t *testing.T) {
	var out bytes.Buffer
	cmd := VersionCommand("osm-agent", "v1.2.3", &out)
	cmd.SetArgs(nil)
	if err := cmd.Execute(); err != nil {
		t.Fatal(err)
	}
	if got, want := out.String(), "osm-agent v1.2.3\n"; got != want {
		t.Errorf("version printed %q, want %q", got, want)
	}
	cmd.SetArgs([]string{"extra"})
	if err := cmd.Execute(); err == nil {
		t.Error("version with an argument succeeded, want an error")
	}
}
