package pluginhost

import (
	"bytes"
	"context"
	"encoding/json"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"time"
)

// stderrRelogger re-logs a plugin's stderr lines through the host's logger.
// JSON lines from provider.Logger keep their level, message and attributes;
// other lines (a panic, a plugin's own printing) are logged as they are.
// go-plugin writes from one goroutine, so no lock is needed.
type stderrRelogger struct {
	log *slog.Logger
	buf []byte
}

func (w *stderrRelogger) Write(p []byte) (int, error) {
	w.buf = append(w.buf, p...)
	for {
		i := bytes.IndexByte(w.buf, '\n')
		if i < 0 {
			break
		}
		w.logLine(string(w.buf[:i]))
		w.buf = w.buf[i+1:]
	}
	return len(p), nil
}

func (w *stderrRelogger) logLine(line string) {
	line = strings.TrimRight(line, "\r")
	if strings.TrimSpace(line) == "" {
		return
	}
	var rec map[string]any
	if json.Unmarshal([]byte(line), &rec) != nil {
		w.log.Info(line, "stream", "stderr")
		return
	}
	level := slog.LevelInfo
	for _, key := range []string{slog.LevelKey, "@level"} { // slog JSON, hclog JSON
		if s, ok := rec[key].(string); ok {
			_ = level.UnmarshalText([]byte(s))
		}
	}
	ctx := context.Background()
	if !w.log.Enabled(ctx, level) {
		return
	}
	msg, _ := rec[slog.MessageKey].(string)
	if msg == "" {
		msg, _ = rec["@message"].(string) // hclog JSON
	}
	// Keep the plugin's own time (slog JSON "time", hclog "@timestamp"):
	// a line can wait in the pipe, and timing a change across processes
	// needs when it happened, not when it was re-logged.
	at := time.Now()
	for _, key := range []string{slog.TimeKey, "@timestamp"} {
		if s, ok := rec[key].(string); ok {
			if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
				at = t
			}
		}
	}
	delete(rec, slog.TimeKey)
	delete(rec, slog.LevelKey)
	delete(rec, slog.MessageKey)
	r := slog.NewRecord(at, level, msg, 0)
	for _, k := range slices.Sorted(maps.Keys(rec)) { // the same line reads the same way every time
		if strings.HasPrefix(k, "@") {
			continue
		}
		r.AddAttrs(slog.Any(k, rec[k]))
	}
	_ = w.log.Handler().Handle(ctx, r)
}
