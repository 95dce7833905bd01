package main

import (
	"os"
	"strings"
	"testing"
)

// FuzzParseConfig feeds arbitrary bytes to the server's config file parser:
// it must never panic, every error must name the file, and a file that
// parses and validates must parse to the same Config again (the parser
// keeps no state between calls).
func FuzzParseConfig(f *testing.F) {
	example, err := os.ReadFile("../../examples/server.yaml")
	if err != nil {
		f.Fatal(err)
	}
	for _, seed := range []string{
		string(example),
		"",
		"dataDir: /x\n",
		"providers: [{name: a, plugin: b, config: {file: /f}}]\n",
		"providers: {name: a}\n",
		"providers: [[1]]\n",
		"memoryLimit: 3GiB\ngcPercent: -1\n",
		"tokenRetention: -5s\n",
		"a: &a [x, x]\nb: *a\n",
		"unknownKey: 1\n",
		"serverNames: [\"\", \"a b\", \"::1\"]\n",
		"debugAddress: {a: b}\n",
		"- 1\n- 2\n",
	} {
		f.Add([]byte(seed))
	}
	const path = "/etc/osm/fuzz.yaml"
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := parseConfig(path, data)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file %s: %v", path, err)
			}
			return
		}
		if cfg.validate() != nil {
			return
		}
		again, err := parseConfig(path, data)
		if err != nil {
			t.Fatalf("second parse of an accepted file failed: %v", err)
		}
		if again.DataDir != cfg.DataDir || len(again.Providers) != len(cfg.Providers) {
			t.Fatalf("second parse differs: %+v vs %+v", again, cfg)
		}
	})
}
