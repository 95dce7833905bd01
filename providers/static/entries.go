package main

import (
	"bytes"

	"github.com/osm-vm/osm-vm/provider"
)

// entryCache makes re-reading a large endpoints file cost what changed in
// it: it remembers the parse of every service entry of the last good file,
// keyed by the entry's text, and parses only entries it has not seen.
//
// The file is cut into entries only when its layout makes that cut exact:
// comments and blank lines, then a line `services:`, then a block sequence
// whose items start at one indentation, and nothing else at or left of that
// indentation. Any other layout, and any entry that fails to parse on its
// own (an alias to another entry's anchor, a quoted scalar or flow
// collection spanning an item boundary, an invalid endpoint, a service
// listed twice), sends the whole file to parseFile, which also writes every
// error message with the file's line numbers. So a file is either cut and
// every entry parsed alone, or parsed whole: never a mix.
//
// Not safe for concurrent use; the provider's reload loop owns it.
type entryCache struct {
	entries map[string]parsedEntry
	// parsed is how many entries the last parse had to parse alone, and
	// whole whether it parsed the file whole instead.
	parsed int
	whole  bool
}

type parsedEntry struct {
	text string // the entry, the key it is cached under
	svc  provider.Service
	eps  []provider.Endpoint // shared with the returned state; never modified
}

// parse returns the content of the endpoints file at path, as parseFile
// does.
func (c *entryCache) parse(path string, data []byte) (map[provider.Service][]provider.Endpoint, error) {
	if entries, ok := splitEntries(data); ok {
		if state, next, ok := c.parseEntries(path, entries); ok {
			c.entries = next
			return state, nil
		}
	}
	c.entries, c.parsed, c.whole = nil, 0, true
	return parseFile(path, data)
}

// parseEntries parses each entry alone, reusing the cache; ok is false
// when the file must be parsed whole.
func (c *entryCache) parseEntries(path string, entries [][]byte) (state map[provider.Service][]provider.Endpoint, next map[string]parsedEntry, ok bool) {
	state = make(map[provider.Service][]provider.Endpoint, len(entries))
	next = make(map[string]parsedEntry, len(entries))
	c.parsed, c.whole = 0, false
	var doc []byte
	for _, entry := range entries {
		pe, hit := c.entries[string(entry)]
		if !hit {
			doc = append(append(doc[:0], "services:\n"...), entry...)
			c.parsed++
			one, err := parseFile(path, doc)
			if err != nil || len(one) != 1 {
				return nil, nil, false
			}
			for svc, eps := range one {
				pe = parsedEntry{text: string(entry), svc: svc, eps: eps}
			}
		}
		if _, dup := state[pe.svc]; dup {
			return nil, nil, false
		}
		state[pe.svc] = pe.eps
		next[pe.text] = pe
	}
	return state, next, true
}

// splitEntries cuts data into the text of each item of its top-level
// `services:` sequence, or reports false when the layout is not one it can
// cut exactly (see entryCache).
func splitEntries(data []byte) (entries [][]byte, ok bool) {
	indent := -1 // of the sequence's items, once seen
	seenKey := false
	start := -1 // of the current entry
	for off := 0; off < len(data); {
		end := bytes.IndexByte(data[off:], '\n')
		if end < 0 {
			end = len(data)
		} else {
			end += off + 1
		}
		line := data[off:end]
		spaces := 0
		for spaces < len(line) && line[spaces] == ' ' {
			spaces++
		}
		rest := line[spaces:]
		switch {
		case len(rest) == 0 || rest[0] == '\n' || rest[0] == '\r' || rest[0] == '\t':
			if len(bytes.TrimRight(rest, " \t\r\n")) > 0 {
				return nil, false // a tab in the indentation
			}
			// a blank line belongs to whatever it is in
		case rest[0] == '#':
			// a comment, or a line of a block scalar in the current entry
		case !seenKey:
			if string(bytes.TrimRight(line, " \t\r\n")) != "services:" {
				return nil, false
			}
			seenKey = true
		case indent >= 0 && spaces > indent:
			// inside the current entry
		case isItem(rest) && (indent < 0 || spaces == indent):
			if start >= 0 {
				entries = append(entries, data[start:off])
			}
			indent, start = spaces, off
		default:
			// another key, a document marker, or an item at another
			// indentation: parse the file whole.
			return nil, false
		}
		off = end
	}
	if start < 0 {
		return nil, false
	}
	return append(entries, data[start:]), true
}

// isItem reports whether a line, from its first non-space byte, starts a
// block sequence item ("-" then a space or the end of the line).
func isItem(rest []byte) bool {
	return rest[0] == '-' && (len(rest) == 1 || rest[1] == ' ' || rest[1] == '\n' || rest[1] == '\r' && len(rest) > 2 && rest[2] == '\n')
}
