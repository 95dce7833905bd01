package pluginhost

import (
	"bytes"
	"encoding/json"
	"log/slog"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestStderrRelogger(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewJSONHandler(&out, &slog.HandlerOptions{Level: slog.LevelDebug})).With("provider", "onprem")
	w := &stderrRelogger{log: log}
	// go-plugin writes the line and its newline separately; a line may
	// also arrive in pieces.
	for _, chunk := range []string{
		`{"time":"2026-01-01T00:00:00Z","level":"WARN","msg":"file malformed","file":"/etc/osm/e.yaml","line":7}`, "\n",
		"panic: boo", "m\n",
		`{"level":"DEBUG","msg":"tick"}` + "\n" + "\n",
	} {
		if _, err := w.Write([]byte(chunk)); err != nil {
			t.Fatal(err)
		}
	}
	var got []map[string]any
	for i, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
		var rec map[string]any
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("relogged line %q: %v", line, err)
		}
		if i > 0 { // the first line keeps the plugin's time; the others are re-logged now
			delete(rec, "time")
		}
		got = append(got, rec)
	}
	want := []map[string]any{
		{"time": "2026-01-01T00:00:00Z", "level": "WARN", "msg": "file malformed", "provider": "onprem", "file": "/etc/osm/e.yaml", "line": float64(7)},
		{"level": "INFO", "msg": "panic: boom", "provider": "onprem", "stream": "stderr"},
		{"level": "DEBUG", "msg": "tick", "provider": "onprem"},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("relogged records (-want +got):\n%s", diff)
	}
}

func TestStderrReloggerKeyOrder(t *testing.T) {
	var out bytes.Buffer
	log := slog.New(slog.NewTextHandler(&out, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == slog.TimeKey {
			return slog.Attr{}
		}
		return a
	}}))
	w := &stderrRelogger{log: log}
	if _, err := w.Write([]byte(`{"level":"INFO","msg":"endpoints file changed","settle":"1ms","diff":"2ms","read_parse":"3ms","file":"e.yaml"}` + "\n")); err != nil {
		t.Fatal(err)
	}
	if got, want := strings.TrimSpace(out.String()), `level=INFO msg="endpoints file changed" diff=2ms file=e.yaml read_parse=3ms settle=1ms`; got != want {
		t.Errorf("relogged line = %s\nwant %s", got, want)
	}
}
