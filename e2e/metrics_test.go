package e2e

import (
	"io"
	"net/http"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"
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
func waitMetrics(t *testing.T, what, url string, timeout time.Duration, patterns ...string) string {
	t.Helper()
	res := make([]*regexp.Regexp, len(patterns))
	for i, p := range patterns {
		res[i] = regexp.MustCompile("(?m)" + p)
	}
	var body string
	for deadline := time.Now().Add(timeout); ; {
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
			t.Fatalf("%s: %s has no line matching %s within %v:\n%s", what, url, missing, timeout, body)
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
