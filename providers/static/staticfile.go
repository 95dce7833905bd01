package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"path/filepath"
	"strings"

	"gopkg.in/yaml.v3"

	"github.com/osm-vm/osm-vm/provider"
)

// The file format is a user-facing contract:
//
//	services:
//	  - name: bookstore
//	    namespace: default
//	    endpoints:
//	      - {ip: 10.0.0.5, port: 14001, labels: {version: v1}}
type fileDoc struct {
	Services []fileService `yaml:"services"`
}

type fileService struct {
	Name      string         `yaml:"name"`
	Namespace string         `yaml:"namespace"`
	Endpoints []fileEndpoint `yaml:"endpoints"`
}

type fileEndpoint struct {
	IP     string            `yaml:"ip"`
	Port   int               `yaml:"port"`
	Labels map[string]string `yaml:"labels"`
}

// parseFile parses and validates the content of the endpoints file at
// path. Every error names the file, the line and the problem.
func parseFile(path string, data []byte) (map[provider.Service][]provider.Endpoint, error) {
	name := filepath.Base(path)
	var doc fileDoc
	dec := yaml.NewDecoder(bytes.NewReader(data))
	dec.KnownFields(true)
	if err := dec.Decode(&doc); err != nil && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("%s: %s", path, yamlMessage(err))
	}
	// Line numbers are only needed for errors: the node tree (a second
	// parse) is built on the first error, so a large good file is parsed once.
	var svcNodes []*yaml.Node
	nodes := func() []*yaml.Node {
		if svcNodes == nil {
			var root yaml.Node
			_ = yaml.Unmarshal(data, &root)
			svcNodes = sequenceItems(&root, "services")
		}
		return svcNodes
	}
	svcLine := func(i int) int { return lineOf(nodes(), i) }
	epLine := func(i, j int) int { return lineOf(sequenceItems(itemNode(nodes(), i), "endpoints"), j) }

	out := make(map[provider.Service][]provider.Endpoint, len(doc.Services))
	seenAt := make(map[provider.Service]int, len(doc.Services)) // service -> index
	for i, fs := range doc.Services {
		svc := provider.Service{Namespace: fs.Namespace, Name: fs.Name}
		if err := svc.Validate(); err != nil {
			return nil, fmt.Errorf("%s:%d: service %d: %w", name, svcLine(i), i+1, err)
		}
		if prev, dup := seenAt[svc]; dup {
			return nil, fmt.Errorf("%s:%d: service %s is listed twice (first at line %d); merge the two entries", name, svcLine(i), svc, svcLine(prev))
		}
		seenAt[svc] = i
		eps := make([]provider.Endpoint, 0, len(fs.Endpoints))
		seen := make(map[netip.AddrPort]int, len(fs.Endpoints)) // address -> index
		for j, fe := range fs.Endpoints {
			at := func() string { return fmt.Sprintf("%s:%d: service %s endpoint %d", name, epLine(i, j), svc, j+1) }
			ip, err := netip.ParseAddr(fe.IP)
			if err != nil {
				return nil, fmt.Errorf("%s: ip %q is not an IPv4 or IPv6 address", at(), fe.IP)
			}
			if ip.Zone() != "" {
				return nil, fmt.Errorf("%s: ip %q has an IPv6 zone; zones are not supported", at(), fe.IP)
			}
			if fe.Port < 1 || fe.Port > 65535 {
				return nil, fmt.Errorf("%s: port %d is out of range 1-65535", at(), fe.Port)
			}
			ap := netip.AddrPortFrom(ip, uint16(fe.Port))
			if prev, dup := seen[ap]; dup {
				return nil, fmt.Errorf("%s: %s is listed twice (first at line %d)", at(), ap, epLine(i, prev))
			}
			seen[ap] = j
			eps = append(eps, provider.Endpoint{IP: ip, Port: uint16(fe.Port), Labels: fe.Labels})
		}
		out[svc] = eps
	}
	return out, nil
}

// yamlMessage turns yaml.v3's messages into "line N: problem" form without
// Go type names.
func yamlMessage(err error) string {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	for _, typ := range []string{"main.fileDoc", "main.fileService", "main.fileEndpoint"} {
		msg = strings.ReplaceAll(msg, " in type "+typ, "")
	}
	// A value of the wrong kind ("cannot unmarshal !!int `0` into
	// main.fileDoc") says what was expected instead of the Go type.
	msg = strings.NewReplacer(
		"into []main.fileService", "into the services list (a list of services)",
		"into []main.fileEndpoint", "into a service's endpoints (a list of endpoints)",
		"into main.fileDoc", "into the file (a mapping with the key services)",
		"into main.fileService", "into a service (a mapping with name, namespace, endpoints)",
		"into main.fileEndpoint", "into an endpoint (a mapping with ip, port, labels)",
	).Replace(msg)
	msg = strings.ReplaceAll(msg, "field ", "unknown key ")
	msg = strings.ReplaceAll(msg, " not found", " (known keys: services; name, namespace, endpoints; ip, port, labels)")
	return msg
}

// sequenceItems returns the items of the sequence under key in mapping n
// (or in the document n wraps).
func sequenceItems(n *yaml.Node, key string) []*yaml.Node {
	if n == nil {
		return nil
	}
	if n.Kind == yaml.DocumentNode && len(n.Content) > 0 {
		n = n.Content[0]
	}
	if n.Kind != yaml.MappingNode {
		return nil
	}
	for i := 0; i+1 < len(n.Content); i += 2 {
		if n.Content[i].Value == key && n.Content[i+1].Kind == yaml.SequenceNode {
			return n.Content[i+1].Content
		}
	}
	return nil
}

func itemNode(items []*yaml.Node, i int) *yaml.Node {
	if i < len(items) {
		return items[i]
	}
	return nil
}

func lineOf(items []*yaml.Node, i int) int {
	if n := itemNode(items, i); n != nil {
		return n.Line
	}
	return 0
}
