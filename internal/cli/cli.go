// Package cli holds what osm-vm's commands (osm-server, osm-agent) share
// at their edge: the process logger from --log-format and --log-level, and
// the build version. It imports nothing of osm-vm.
package cli

import (
	"fmt"
	"io"
	"log/slog"
	"runtime/debug"
)

// NewLogger returns the process logger for --log-format (text or json) and
// --log-level (debug, info, warn or error).
func NewLogger(w io.Writer, format, level string) (*slog.Logger, error) {
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(level)); err != nil {
		return nil, fmt.Errorf("--log-level %q: want debug, info, warn or error", level)
	}
	opts := &slog.HandlerOptions{Level: lvl}
	switch format {
	case "text":
		return slog.New(slog.NewTextHandler(w, opts)), nil
	case "json":
		return slog.New(slog.NewJSONHandler(w, opts)), nil
	default:
		return nil, fmt.Errorf("--log-format %q: want text or json", format)
	}
}

// Version returns set (the version given at build time with -ldflags
// "-X main.version=..."), else the module version, else "dev".
func Version(set string) string {
	if set != "" {
		return set
	}
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "dev"
}
