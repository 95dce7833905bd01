package agenttest

import (
	"context"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/testwait"
)

// LogRecord is one record a logger from NewLogger received.
type LogRecord struct {
	Level   slog.Level
	Message string
	Attrs   map[string]string
}

// Logs receives the records of a logger from NewLogger, so a test can wait
// for a line instead of sleeping.
type Logs struct {
	ch chan LogRecord
}

// NewLogger returns a logger whose records go to the returned Logs (and
// are dropped once 10,000 are waiting, never blocking the code under test).
func NewLogger() (*slog.Logger, *Logs) {
	l := &Logs{ch: make(chan LogRecord, 10000)}
	return slog.New(&logHandler{ch: l.ch}), l
}

// Wait returns the next record whose message contains substr, failing the
// test after 20s.
func (l *Logs) Wait(t testing.TB, substr string) LogRecord {
	t.Helper()
	timeout := time.After(testwait.Bound(t))
	for {
		select {
		case r := <-l.ch:
			if strings.Contains(r.Message, substr) {
				return r
			}
		case <-timeout:
			t.Fatalf("no log record containing %q", substr)
		}
	}
}

type logHandler struct {
	ch    chan LogRecord
	attrs []slog.Attr
}

func (h *logHandler) Enabled(context.Context, slog.Level) bool { return true }

func (h *logHandler) Handle(_ context.Context, r slog.Record) error {
	rec := LogRecord{Level: r.Level, Message: r.Message, Attrs: map[string]string{}}
	for _, a := range h.attrs {
		rec.Attrs[a.Key] = a.Value.String()
	}
	r.Attrs(func(a slog.Attr) bool { rec.Attrs[a.Key] = a.Value.String(); return true })
	select {
	case h.ch <- rec:
	default:
	}
	return nil
}

func (h *logHandler) WithAttrs(as []slog.Attr) slog.Handler {
	return &logHandler{ch: h.ch, attrs: append(append([]slog.Attr{}, h.attrs...), as...)}
}

func (h *logHandler) WithGroup(string) slog.Handler { return h }
