package agent

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// FuzzParseConfig feeds arbitrary bytes to the agent's config file parser:
// it must never panic, every error must name the file, and a config it
// accepts must survive WriteConfig and LoadConfig unchanged, an empty
// map being no map (install writes the file the agent later reads).
func FuzzParseConfig(f *testing.F) {
	for _, seed := range []string{
		"server: https://osm.example.com:15443\nservice: bookstore\nnamespace: default\n",
		"server: https://10.0.0.1:15443\ncaCertHash: sha256:" + strings.Repeat("ab", 32) + "\nservice: a\nnamespace: b\nproxy: envoy\nadminPort: 15000\nappPort: 8080\nadvertiseAddress: 10.0.0.2\nlabels: {zone: a}\ndataDir: /var/lib/osm-agent\nhostsFile: /etc/hosts\ndrainTimeout: 5s\npollInterval: 30s\n",
		"",
		"server: http://x\n",
		"adminPort: 70000\n",
		"drainTimeout: -1s\n",
		"labels: {\"\": x}\n",
		"a: &a [x, x]\nb: *a\n",
		"server: [1]\n",
	} {
		f.Add([]byte(seed))
	}
	const path = "/etc/osm/agent.yaml"
	f.Fuzz(func(t *testing.T, data []byte) {
		cfg, err := ParseConfig(path, data)
		if err != nil {
			if !strings.Contains(err.Error(), path) {
				t.Fatalf("error does not name the file %s: %v", path, err)
			}
			return
		}
		out := filepath.Join(t.TempDir(), "agent.yaml")
		if err := WriteConfig(out, cfg); err != nil {
			t.Fatalf("WriteConfig of an accepted config: %v", err)
		}
		again, err := LoadConfig(out)
		if err != nil {
			t.Fatalf("LoadConfig of what WriteConfig wrote: %v\ninput: %q", err, data)
		}
		if diff := cmp.Diff(cfg, again, cmpopts.EquateEmpty()); diff != "" {
			t.Fatalf("config changed through WriteConfig and LoadConfig (-accepted +reread):\n%s\ninput: %q", diff, data)
		}
	})
}
