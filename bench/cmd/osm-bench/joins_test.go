package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestJoinsOut: --joins-out appends one line per join, each server's
// after the other's, with its start in Unix microseconds and its latency
// in microseconds.
func TestJoinsOut(t *testing.T) {
	path := filepath.Join(t.TempDir(), "joins.txt")
	t0 := time.UnixMicro(1_764_640_000_000_000)
	if err := appendJoins(path, "O", []time.Time{t0, t0.Add(3 * time.Millisecond)}, []float64{2.5, 3.25}); err != nil {
		t.Fatal(err)
	}
	if err := appendJoins(path, "L-mux", []time.Time{t0.Add(time.Second)}, []float64{1.999}); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	want := strings.Join([]string{
		"O 1764640000000000 2500",
		"O 1764640000003000 3250",
		"L-mux 1764640001000000 1999",
	}, "\n") + "\n"
	if string(b) != want {
		t.Errorf("--joins-out wrote\n%s\nwant\n%s", b, want)
	}
}
