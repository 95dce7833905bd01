// Package clip shortens text that comes from outside (a proxy's NACK
// message, a peer's error) to a bound before it is kept, served or
// logged, so that whoever sends it cannot choose how much memory, state
// or log it costs. It is a leaf: it imports nothing of osm-vm.
package clip

import (
	"strconv"
	"strings"
	"unicode/utf8"
)

// String returns s when it is at most max bytes long; otherwise the
// longest start of s that ends on a rune boundary and, with a marker
// saying how many bytes were cut (" ... [N bytes cut]"), is at most max
// bytes. The start is copied: the result does not keep s's memory alive.
// A max too small for the marker gives the marker alone.
func String(s string, max int) string {
	if len(s) <= max {
		return s
	}
	// The marker for len(s) bytes cut is at least as long as the one for
	// fewer: keeping max minus its length keeps the whole within max.
	keep := max - len(marker(len(s)))
	if keep <= 0 {
		return marker(len(s))
	}
	for keep > 0 && !utf8.RuneStart(s[keep]) {
		keep--
	}
	return strings.Clone(s[:keep]) + marker(len(s)-keep)
}

func marker(cut int) string {
	return " ... [" + strconv.Itoa(cut) + " bytes cut]"
}
