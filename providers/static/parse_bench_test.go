package main

import (
	"fmt"
	"strings"
	"testing"
)

// BenchmarkParseLargeFile parses a 1,000-service, 10,000-endpoint file, the
// size the control-plane benchmark edits (every edit is a full re-parse).
func BenchmarkParseLargeFile(b *testing.B) {
	var sb strings.Builder
	sb.WriteString("services:\n")
	for s := range 1000 {
		fmt.Fprintf(&sb, "  - name: svc-%05d\n    namespace: bench\n    endpoints:\n", s)
		for e := range 10 {
			fmt.Fprintf(&sb, "      - {ip: 10.%d.%d.%d, port: 8080}\n", s>>8, s&255, e+1)
		}
	}
	data := []byte(sb.String())
	b.ResetTimer()
	for b.Loop() {
		if _, err := parseFile("f.yaml", data); err != nil {
			b.Fatal(err)
		}
	}
}
