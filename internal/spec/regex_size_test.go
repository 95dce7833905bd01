package spec

import (
	"fmt"
	"strings"
	"testing"
)

func routeGroupWithRegex(re string) string {
	return fmt.Sprintf("apiVersion: specs.smi-spec.io/v1alpha4\nkind: HTTPRouteGroup\nmetadata: {name: r}\nspec:\n  matches:\n    - {name: m, pathRegex: %q}\n", re)
}

// TestRegexProgramSizeBound applies regexes just below and just above
// Envoy's limit (a{1000} repeated: one instruction per a in RE2 and in
// the estimate), and ones the estimate must refuse because RE2 spends
// far more on them than Go's program has instructions: every . and
// non-ASCII class is a UTF-8 automaton of at least 14 byte ranges (RE2's
// Add_80_10ffff and the two ASCII ranges of [^\n]), so 2,500 dots are at
// least 35,000 instructions.
func TestRegexProgramSizeBound(t *testing.T) {
	base := strings.Repeat("a{1000}", 32)
	n := maxRegexProgram - regexProgramSize(base+"b")
	below, above := base+fmt.Sprintf("b{%d}", n+1), base+fmt.Sprintf("b{%d}", n+2)
	if got := regexProgramSize(below); got != maxRegexProgram {
		t.Fatalf("size of the regex below = %d, want exactly %d", got, maxRegexProgram)
	}
	if got := regexProgramSize(above); got != maxRegexProgram+1 {
		t.Fatalf("size of the regex above = %d, want %d", got, maxRegexProgram+1)
	}
	for _, c := range []struct {
		name, re string
		refused  bool
	}{
		{"just below", below, false},
		{"just above", above, true},
		{"2,500 dots", strings.Repeat(".{500}", 5), true},
		{"2,500 negated classes", strings.Repeat("[^/]{500}", 5), true},
		{"a letter class 8 times", strings.Repeat(`\pL`, 8), true},
		{"a letter class once", `/\pL+`, false},
		{"an ordinary route", `/api/v[0-9]+/users/[^/]+/orders(/.*)?`, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Parse([]byte(routeGroupWithRegex(c.re)), "web.yaml")
			switch {
			case c.refused && (err == nil || !strings.Contains(err.Error(), "over Envoy's limit of 32768")):
				t.Errorf("size %d: error = %v, want it refused over the limit", regexProgramSize(c.re), err)
			case !c.refused && err != nil:
				t.Errorf("size %d: %v, want it accepted", regexProgramSize(c.re), err)
			}
		})
	}
}

// TestRegexProgramSizeCountsUTF8 pins the estimate of classes to RE2's
// UTF-8 compilation: . is [^\n] (two ASCII ranges and the 12 byte ranges
// of 80-10FFFF), é two bytes, a range across UTF-8 lengths and leading
// bytes one sequence per piece as RE2 splits it (C4-DF 80-BF, E0 A0-BF
// 80-BF, E1-EF 80-BF 80-BF), and two per alternative beyond the first.
func TestRegexProgramSizeCountsUTF8(t *testing.T) {
	for name, c := range map[string]struct {
		ranges []rune
		want   int
	}{
		"a":                    {[]rune{'a', 'a'}, 1},
		"[a-z]":                {[]rune{'a', 'z'}, 1},
		"[^\\n]":               {[]rune{0, 9, 11, 0x10ffff}, 14 + 2*7},
		"any":                  {[]rune{0, 0x10ffff}, 13 + 2*6},
		"é":                    {[]rune{0xe9, 0xe9}, 2},
		"[aé]":                 {[]rune{'a', 'a', 0xe9, 0xe9}, 3 + 2},
		"[\\x{100}-\\x{ffff}]": {[]rune{0x100, 0xffff}, 8 + 2*2},
	} {
		if got := classSize(c.ranges); got != c.want {
			t.Errorf("classSize(%s) = %d, want %d", name, got, c.want)
		}
	}
}
