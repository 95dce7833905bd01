package e2e

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
)

// docCommands returns every osm-server / osm-agent command line in the
// code blocks of README.md and docs/ (continuation lines joined, comments
// dropped), with where it was found.
func docCommands(t *testing.T) map[string][]string {
	t.Helper()
	files := []string{"../README.md"}
	filepath.WalkDir("../docs", func(p string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() && strings.HasSuffix(p, ".md") {
			files = append(files, p)
		}
		return nil
	})
	out := map[string][]string{}
	for _, f := range files {
		fh, err := os.Open(f)
		if err != nil {
			t.Fatal(err)
		}
		s := bufio.NewScanner(fh)
		inCode, lineNo, pending := false, 0, ""
		for s.Scan() {
			lineNo++
			line := s.Text()
			if strings.HasPrefix(strings.TrimSpace(line), "```") {
				inCode, pending = !inCode, ""
				continue
			}
			if !inCode {
				// Inline code spans naming a command count too.
				for _, span := range inlineSpans(line) {
					fs := strings.Fields(span)
					if len(fs) < 2 || (fs[0] != "osm-server" && fs[0] != "osm-agent") || strings.HasPrefix(fs[len(fs)-1], "-") {
						continue // not a command, or a fragment ending in a flag whose value the prose gives
					}
					// "osm-server token/proxy/ca" names several subcommands.
					for _, sub := range strings.Split(fs[1], "/") {
						out[f+":"+strconv.Itoa(lineNo)+" `"+fs[0]+" "+sub+"`"] = append([]string{fs[0], sub}, fs[2:]...)
					}
				}
				continue
			}
			line = strings.TrimSpace(line)
			if pending != "" {
				line = pending + " " + line
				pending = ""
			}
			if strings.HasSuffix(line, `\`) {
				pending = strings.TrimSuffix(line, `\`)
				continue
			}
			if i := strings.Index(line, " #"); i >= 0 {
				line = line[:i]
			}
			fields := strings.Fields(line)
			if len(fields) == 0 {
				continue
			}
			switch filepath.Base(fields[0]) {
			case "osm-server", "osm-agent":
				out[f+":"+strconv.Itoa(lineNo)] = fields
			}
		}
		fh.Close()
	}
	return out
}

// inlineSpans returns the `code` spans of a line of prose.
func inlineSpans(line string) []string {
	parts := strings.Split(line, "`")
	var out []string
	for i := 1; i < len(parts); i += 2 {
		out = append(out, parts[i])
	}
	return out
}

// TestDocsCommandsParse: every osm-server and osm-agent command shown in
// the docs names a real subcommand and real flags (cobra parses the flags
// before it honours --help, so an unknown one fails), so the docs cannot
// drift from the code unnoticed.
func TestDocsCommandsParse(t *testing.T) {
	bin := t.TempDir()
	for name, pkg := range map[string]string{"osm-server": "./cmd/osm-server", "osm-agent": "./cmd/osm-agent"} {
		cmd := exec.Command("go", "build", "-o", filepath.Join(bin, name), pkg)
		cmd.Dir = ".."
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("go build %s: %v\n%s", pkg, err, out)
		}
	}
	cmds := docCommands(t)
	if len(cmds) < 10 {
		t.Fatalf("found only %d commands in the docs; the scanner is broken", len(cmds))
	}
	t.Logf("checking %d commands from README.md and docs/", len(cmds))
	for where, fields := range cmds {
		args := append(fields[1:], "--help")
		out, err := exec.Command(filepath.Join(bin, filepath.Base(fields[0])), args...).CombinedOutput()
		if err != nil {
			t.Errorf("%s: `%s` does not parse: %v\n%s", where, strings.Join(fields, " "), err, out)
			continue
		}
		// A misspelt subcommand makes cobra print the root's help: the
		// usage must name the subcommand given.
		if len(fields) > 1 && !strings.HasPrefix(fields[1], "-") && !strings.Contains(string(out), filepath.Base(fields[0])+" "+fields[1]) {
			t.Errorf("%s: `%s`: help is not the %s subcommand's:\n%s", where, strings.Join(fields, " "), fields[1], out)
		}
	}
}
