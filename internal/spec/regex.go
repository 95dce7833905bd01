package spec

// The bound of a route's regular expressions: Envoy refuses a regex whose
// RE2 program is over its limit, so apply refuses it first.

import (
	"regexp"
	"regexp/syntax"
	"unicode"
	"unicode/utf8"
)

func checkRegex(v *validator, field, re string) {
	if _, err := regexp.Compile(re); err != nil {
		v.errorf(field, "invalid RE2 regular expression %q: %v", re, regexErr(err))
		return
	}
	if n := regexProgramSize(re); n > maxRegexProgram {
		v.errorf(field, "regular expression %q is too complex: its RE2 program is estimated at up to %d instructions, over Envoy's limit of %d (runtime re2.max_program_size.error_level, as osm-agent's bootstrap sets it); the estimate never counts low, so an expression near the limit may be refused that Envoy would take: use fewer repetitions, fewer non-ASCII classes or dots", re, n, maxRegexProgram)
	}
}

// maxRegexProgram is Envoy's limit on a regular expression's RE2 program
// size as the bootstrap osm-agent writes sets it (runtime
// re2.max_program_size.error_level, 100 by default, raised to 32,768;
// internal/agent/envoy.Re2ProgramSizeLimit). regexProgramSize is an upper
// bound of RE2's count, so it is compared with the limit itself.
const maxRegexProgram = 32768

// regexProgramSize returns an upper bound of the size of re's RE2 program
// (re must compile), which Envoy compares with its limit (RE2::
// ProgramSize: the instructions of the compiled, flattened program). It
// compiles re with Go's regexp/syntax (the same parse, simplification
// and expansion of counted repetitions as RE2's) and weighs each
// instruction by what RE2 spends on it:
//
//   - a character class (and a literal, its case-folded forms included,
//     and . in both modes) as RE2 compiles it, to UTF-8 byte ranges: each
//     range split as RE2's AddRuneRangeUTF8 does into byte sequences, one
//     instruction per byte, with no suffix shared (RE2 shares some), 80-
//     10FFFF as RE2's fixed 12 instructions, and two per alternative
//     beyond the first (an Alt, and the Nop flattening may leave);
//   - an alternation (|, ?, *, +) two (the Alt and such a Nop);
//   - anything else one; and 8 for RE2's unanchored prefix and its Fail.
func regexProgramSize(re string) int {
	parsed, err := syntax.Parse(re, syntax.Perl)
	if err != nil {
		return 0
	}
	prog, err := syntax.Compile(parsed.Simplify())
	if err != nil {
		return 0
	}
	n := 8
	for _, inst := range prog.Inst {
		switch inst.Op {
		case syntax.InstAlt, syntax.InstAltMatch:
			n += 2
		case syntax.InstRune, syntax.InstRune1:
			n += classSize(instRanges(inst))
		case syntax.InstRuneAny:
			n += classSize([]rune{0, unicode.MaxRune})
		case syntax.InstRuneAnyNotNL:
			n += classSize([]rune{0, '\n' - 1, '\n' + 1, unicode.MaxRune})
		default:
			n++
		}
	}
	return n
}

// instRanges returns the ranges a rune instruction matches, a case-folded
// literal's every form included.
func instRanges(inst syntax.Inst) []rune {
	if len(inst.Rune) != 1 || syntax.Flags(inst.Arg)&syntax.FoldCase == 0 {
		if len(inst.Rune) == 1 {
			return []rune{inst.Rune[0], inst.Rune[0]}
		}
		return inst.Rune
	}
	var out []rune
	r := inst.Rune[0]
	for f := r; ; {
		out = append(out, f, f)
		if f = unicode.SimpleFold(f); f == r {
			return out
		}
	}
}

// classSize is the bound of the instructions RE2 spends on a class of
// ranges (lo, hi pairs): see regexProgramSize.
func classSize(ranges []rune) int {
	bytes, seqs := 0, 0
	add := func(n int) { bytes, seqs = bytes+n, seqs+1 }
	for i := 0; i+1 < len(ranges); i += 2 {
		lo, hi := ranges[i], ranges[i+1]
		if lo < utf8.RuneSelf {
			add(1) // an ASCII part is one byte range
			lo = utf8.RuneSelf
		}
		if lo > hi {
			continue
		}
		if lo == utf8.RuneSelf && hi == unicode.MaxRune {
			bytes, seqs = bytes+12, seqs+6 // RE2's Add_80_10ffff
			continue
		}
		utf8Sequences(lo, hi, add)
	}
	return bytes + 2*max(seqs-1, 0)
}

// utf8Sequences splits lo-hi (beyond ASCII) as RE2's AddRuneRangeUTF8
// does, calling add with the length of each byte sequence.
func utf8Sequences(lo, hi rune, add func(int)) {
	if lo > hi {
		return
	}
	for _, max := range []rune{0x7ff, 0xffff} { // the last rune of each UTF-8 length
		if lo <= max && max < hi {
			utf8Sequences(lo, max, add)
			utf8Sequences(max+1, hi, add)
			return
		}
	}
	for i := 1; i < utf8.UTFMax; i++ {
		m := rune(1)<<(6*i) - 1 // the last i bytes of a sequence
		if lo&^m != hi&^m {
			if lo&m != 0 {
				utf8Sequences(lo, lo|m, add)
				utf8Sequences((lo|m)+1, hi, add)
				return
			}
			if hi&m != m {
				utf8Sequences(lo, hi&^m-1, add)
				utf8Sequences(hi&^m, hi, add)
				return
			}
		}
	}
	add(utf8.RuneLen(lo))
}

// checkHeaderMatches checks header (or query parameter) matches: names
// are unique, case-insensitively for headers (listType=map on name).
