package spec

import (
	"errors"
	"fmt"

	"go.yaml.in/yaml/v3"
)

// Size limits of the mesh specification. Sizes are in bytes of the JSON
// form: what a document decodes to, with YAML aliases (*name) expanded,
// and what the store holds.
//
//   - A request body is at most MaxRequestBytes.
//   - One document is at most maxDocumentBytes, aliases expanded: measured
//     on the parsed YAML tree before the document is decoded, then exactly
//     on its JSON form. 256 KiB is about 3,500 sources in one
//     TrafficTarget, and keeps one document within a Consul KV value
//     (512 KiB) even base64-encoded as Consul's transaction API sends it.
//   - The documents of one request (all its files) add up to at most
//     maxRequestExpandedBytes, aliases expanded, so no request grows the
//     store or the server's memory by more than that whatever its aliases.
//   - The stored specification (every document and VIP, one store value
//     each: see store.go) is at most maxStoredBytes: about 40,000 Services
//     with a TrafficTarget each (the benchmark's 1,000 store 0.8 MB). A
//     change that shrinks it is always allowed. One document stays within
//     one store transaction (store.MaxTxnBytes), so within Consul's limits.
//   - A file of a request holds at most maxRequestNodes YAML nodes, counted
//     from its bytes before it is parsed (see nodeBound): the YAML parser
//     spends some 500 bytes per node, so 4 MiB of "[1,1,1,...]" cost over a
//     gigabyte before this bound; 250,000 nodes are about 120 MiB, and a
//     batch of 200 benchmark documents holds some 6,000.
const (
	maxRequestNodes         = 250_000
	MaxRequestBytes         = 4 << 20
	maxDocumentBytes        = 256 << 10
	maxRequestExpandedBytes = 4 << 20
	maxStoredBytes          = 32 << 20
)

// nodeBound returns an upper bound of the number of YAML nodes data can
// hold, without parsing it: every node ends at, or begins with, one of the
// bytes counted (a separator, an indicator or a line break), and a key and
// its value share at most one ':'.
func nodeBound(data []byte) int {
	n := 1
	for _, b := range data {
		switch b {
		case '\n', ',', ':', '-', '[', ']', '{', '}', '?':
			n += 2
		}
	}
	return n
}

// sizeString writes a limit as "256 KiB" or "4 MiB".
func sizeString(n int64) string {
	switch {
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// errAliasCycle is returned by expandedSize for an alias inside the node it
// names.
var errAliasCycle = errors.New("alias cycle")

// expander measures the expanded size of YAML nodes: each alias counts as
// the size of the node it names, remembered per anchor so the walk visits
// every node once however often it is aliased. Sizes saturate at limit+1.
type expander struct {
	limit int64
	sizes map[*yaml.Node]int64 // anchored nodes measured (-1 while measuring)
	cycle *yaml.Node           // the alias that closed a cycle
}

func newExpander(limit int64) *expander {
	return &expander{limit: limit, sizes: map[*yaml.Node]int64{}}
}

// size returns n's size in about the bytes of its JSON form, or more than
// e.limit once it exceeds the limit (then it stops counting).
func (e *expander) size(n *yaml.Node) (int64, error) {
	switch n.Kind {
	case yaml.AliasNode:
		t := n.Alias
		if t == nil {
			return 0, nil
		}
		switch s, ok := e.sizes[t]; {
		case ok && s < 0:
			e.cycle = n
			return 0, errAliasCycle
		case ok:
			return s, nil
		}
		e.sizes[t] = -1
		s, err := e.size(t)
		if err != nil {
			return 0, err
		}
		e.sizes[t] = s
		return s, nil
	case yaml.ScalarNode:
		return min(int64(len(n.Value))+3, e.limit+1), nil // quotes and a separator
	}
	var total int64 = 2 // brackets
	for _, c := range n.Content {
		s, err := e.size(c)
		if err != nil {
			return 0, err
		}
		if total += s; total > e.limit {
			return e.limit + 1, nil
		}
	}
	return total, nil
}

// peekKey reads the kind, namespace and name of a document from its YAML
// tree without decoding it, for errors about documents too large to decode.
func peekKey(n *yaml.Node) Key {
	field := func(m *yaml.Node, name string) *yaml.Node {
		if m == nil || m.Kind != yaml.MappingNode {
			return nil
		}
		for i := 0; i+1 < len(m.Content); i += 2 {
			if m.Content[i].Value == name {
				return m.Content[i+1]
			}
		}
		return nil
	}
	scalar := func(n *yaml.Node) string {
		if n != nil && n.Kind == yaml.ScalarNode {
			return n.Value
		}
		return ""
	}
	md := field(n, "metadata")
	k := Key{Kind: scalar(field(n, "kind")), Namespace: scalar(field(md, "namespace")), Name: scalar(field(md, "name"))}
	if ki, ok := lookupKind(k.Kind); ok && ki.namespaced && k.Namespace == "" {
		k.Namespace = DefaultNamespace
	}
	return k
}
