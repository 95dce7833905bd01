package resilience

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// Every row of the matrix says what each client does, and what apply
// tells of a field some client does not honour.
func TestProxylessSupportRows(t *testing.T) {
	seen := map[string]bool{}
	for _, s := range ProxylessSupport() {
		if seen[s.Field] {
			t.Errorf("%s: twice in the matrix", s.Field)
		}
		seen[s.Field] = true
		honoured := true
		for _, c := range Clients {
			switch v := s.Verdicts[c]; v {
			case Honoured:
			case Ignored:
				honoured = false
			case Replaced, Misapplied:
				honoured = false
				if s.Notes[c] == "" {
					t.Errorf("%s: %s %v with no note saying what it does instead", s.Field, c, v)
				}
			default:
				t.Errorf("%s: %s has no verdict", s.Field, c)
			}
		}
		if !honoured && s.Proxyless == "" {
			t.Errorf("%s: not honoured by every client, but no warning text", s.Field)
		}
	}
}

// supportTable is the support matrix as docs/operator-guide.md writes it.
func supportTable() string {
	var b strings.Builder
	b.WriteString("| Field | Envoy | " + GRPCGo.String() + " | " + CCore.String() + " | " + GRPCJS.String() + " |\n")
	b.WriteString("|-------|-------|------|------|------|\n")
	for _, s := range ProxylessSupport() {
		path, what, _ := strings.Cut(s.Field, ": ")
		cell := "`" + path + "`"
		if what != "" {
			cell += ": " + what
		}
		b.WriteString("| " + cell + " | yes")
		for _, c := range Clients {
			b.WriteString(" | " + s.Cell(c))
		}
		b.WriteString(" |\n")
	}
	return b.String()
}

// The operator guide's support matrix is this package's.
func TestOperatorGuideSupportMatrix(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "..", "docs", "operator-guide.md"))
	if err != nil {
		t.Fatal(err)
	}
	if want := supportTable(); !strings.Contains(string(b), want) {
		t.Errorf("docs/operator-guide.md has not the support matrix of ProxylessSupport; want it to contain:\n%s", want)
	}
}
