package e2e

import (
	"encoding/json"
	"io"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/testwait"
)

// scrape returns the body of GET url ("" when it does not answer 200).
func scrape(url string) string {
	resp, err := http.Get(url)
	if err != nil {
		return ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return ""
	}
	return string(b)
}

// waitMetrics scrapes url until every pattern (a regexp over the
// exposition's lines) matches, and then requires `promtool check metrics`
// (Debian's prometheus package; make test-deps installs it) to find
// nothing to say about the exposition.
func waitMetrics(t *testing.T, what, url string, patterns ...string) string {
	t.Helper()
	res := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		res[i] = regexp.MustCompile("(?m)" + p)
	}
	var body string
	bound := testwait.Bound(t)
	for deadline := time.Now().Add(bound); ; {
		body = scrape(url)
		missing := ""
		for _, re := range res {
			if !re.MatchString(body) {
				missing = re.String()
				break
			}
		}
		if missing == "" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: %s has no line matching %s within %v:\n%s", what, url, missing, bound.Round(time.Millisecond), body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		t.Fatal("promtool not found: install Debian's prometheus package (make test-deps does)")
	}
	cmd := exec.Command(promtool, "check", "metrics")
	cmd.Stdin = strings.NewReader(body)
	out, err := cmd.CombinedOutput()
	if err != nil || len(out) > 0 {
		t.Errorf("%s: promtool check metrics on %s: %v\n%s", what, url, err, out)
	}
	return body
}

// grafanaDashboard is the Grafana dashboard shipped for these metrics.
const grafanaDashboard = "../docs/grafana/osm-vm.json"

// checkGrafanaDashboard requires the shipped Grafana dashboard to parse and
// every metric its queries name to be in one of the expositions given.
func checkGrafanaDashboard(t *testing.T, expositions ...string) {
	t.Helper()
	raw, err := os.ReadFile(grafanaDashboard)
	if err != nil {
		t.Fatal(err)
	}
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Query any `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal(raw, &d); err != nil {
		t.Fatalf("%s: %v", grafanaDashboard, err)
	}
	var queries []string
	for _, p := range d.Panels {
		if len(p.Targets) == 0 {
			t.Errorf("%s: panel %q has no query", grafanaDashboard, p.Title)
		}
		for _, q := range p.Targets {
			queries = append(queries, q.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if s, ok := v.Query.(string); ok {
			queries = append(queries, s)
		}
	}
	all := strings.Join(expositions, "\n")
	name := regexp.MustCompile(`\b(?:osm|go|process)_[a-z0-9_]+\b`)
	seen := 0
	for _, q := range queries {
		for _, m := range name.FindAllString(q, -1) {
			seen++
			if !regexp.MustCompile(`(?m)^` + m + `[{ ]`).MatchString(all) {
				t.Errorf("%s: query %q names %s, which neither osm-server nor osm-agent exposes", grafanaDashboard, q, m)
			}
		}
	}
	if seen < 20 {
		t.Errorf("%s: only %d metric references found; the check is not reading the queries", grafanaDashboard, seen)
	}
}
