package main

import (
	"fmt"
	"strings"
	"testing"
)

// largeFile is a 1,000-service, 10,000-endpoint file, the size the
// control-plane benchmark edits; changed moves one endpoint of service 1.
func largeFile(changed int) []byte {
	var sb strings.Builder
	sb.WriteString("services:\n")
	for s := range 1000 {
		fmt.Fprintf(&sb, "  - name: svc-%05d\n    namespace: bench\n    endpoints:\n", s)
		for e := range 10 {
			if s == 1 && e == 0 && changed > 0 {
				fmt.Fprintf(&sb, "      - {ip: 10.255.0.%d, port: 8080}\n", changed)
				continue
			}
			fmt.Fprintf(&sb, "      - {ip: 10.%d.%d.%d, port: 8080}\n", s>>8, s&255, e+1)
		}
	}
	return []byte(sb.String())
}

// BenchmarkParseLargeFile parses the large file whole (the first read, and
// any file the entry cache cannot cut).
func BenchmarkParseLargeFile(b *testing.B) {
	data := largeFile(0)
	b.ResetTimer()
	for b.Loop() {
		if _, err := parseFile("f.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkReparseOneChange re-reads the large file after an edit that
// moves one endpoint, as the provider does on every edit.
func BenchmarkReparseOneChange(b *testing.B) {
	files := [][]byte{largeFile(1), largeFile(2)}
	c := &entryCache{}
	if _, err := c.parse("f.yaml", largeFile(0)); err != nil {
		b.Fatal(err)
	}
	i := 0
	for b.Loop() {
		if _, err := c.parse("f.yaml", files[i%2]); err != nil {
			b.Fatal(err)
		}
		i++
	}
	if c.parsed != 1 {
		b.Fatalf("parsed %d entries, want 1", c.parsed)
	}
}
