package main

import (
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLogTail: the last lines of a server log, all of a short one, and
// the error for a missing file.
func TestLogTail(t *testing.T) {
	path := filepath.Join(t.TempDir(), "servers.log")
	if err := os.WriteFile(path, []byte("a\nb\nc\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got := logTail(path, 2); got != "b\nc" {
		t.Errorf("logTail(2) = %q, want %q", got, "b\nc")
	}
	if got := logTail(path, 5); got != "a\nb\nc" {
		t.Errorf("logTail(5) = %q, want the whole file", got)
	}
	if got := logTail(filepath.Join(t.TempDir(), "none"), 2); !strings.Contains(got, "no such file") {
		t.Errorf("logTail of a missing file = %q, want the error", got)
	}
}

func TestRoundOrderAlternates(t *testing.T) {
	servers := []string{"O", "L-mux", "F"}
	var got []string
	for round := 1; round <= 3; round++ {
		got = append(got, strings.Join(roundOrder(servers, round), ","))
	}
	if want := []string{"O,L-mux,F", "F,L-mux,O", "O,L-mux,F"}; !slices.Equal(got, want) {
		t.Errorf("orders %q; want %q", got, want)
	}
	if strings.Join(servers, ",") != "O,L-mux,F" {
		t.Errorf("roundOrder changed its argument: %q", servers)
	}
}
