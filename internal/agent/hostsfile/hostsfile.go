// Package hostsfile keeps one managed block in a hosts file (/etc/hosts)
// that maps mesh host names (and the external names an Egress allows) to
// their virtual IPs, leaving every other line untouched. Of osm-vm it
// imports only internal/atomicfile.
package hostsfile

import (
	"bytes"
	"cmp"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"

	"github.com/osm-vm/osm-vm/internal/atomicfile"
)

// The marker lines around the managed block.
const (
	BeginMarker = "# BEGIN osm-agent managed block: do not edit, osm-agent rewrites it"
	EndMarker   = "# END osm-agent managed block"
)

// Entry maps one host name to an address.
type Entry struct {
	Hostname string     `json:"hostname"`
	IP       netip.Addr `json:"ip"`
}

// Update rewrites the managed block of the hosts file at path to hold
// exactly entries (sorted by host name), or removes the block when entries
// is empty. Lines outside the block are kept byte for byte. The file is
// replaced atomically with its mode preserved; a file that cannot be renamed
// over (a bind-mounted /etc/hosts in a container) is rewritten in place.
// It reports whether the file changed.
func Update(path string, entries []Entry) (bool, error) {
	if real, err := filepath.EvalSymlinks(path); err == nil {
		path = real
	}
	for _, e := range entries {
		if !e.IP.IsValid() {
			return false, fmt.Errorf("hosts file %s: entry %q has no IP address", path, e.Hostname)
		}
		if e.Hostname == "" || strings.ContainsAny(e.Hostname, " \t\r\n#") {
			return false, fmt.Errorf("hosts file %s: host name %q is empty or holds whitespace or '#'", path, e.Hostname)
		}
	}
	old, err := os.ReadFile(path)
	mode := os.FileMode(0o644)
	switch {
	case err == nil:
		if fi, err := os.Stat(path); err == nil {
			mode = fi.Mode().Perm()
		}
	case errors.Is(err, os.ErrNotExist):
	default:
		return false, fmt.Errorf("hosts file: %w", err)
	}
	updated := Render(old, entries)
	if bytes.Equal(old, updated) {
		return false, nil
	}
	err = atomicfile.WriteFile(path, updated, mode)
	if errors.Is(err, syscall.EBUSY) || errors.Is(err, syscall.EXDEV) {
		err = os.WriteFile(path, updated, mode)
	}
	if err != nil {
		return false, fmt.Errorf("hosts file: %w (run osm-agent as root, or set hostsFile to a file it may write)", err)
	}
	return true, nil
}

// Render returns content with its managed block replaced by entries. The
// block stays where it was; a new block goes at the end. A begin marker with
// no end marker ends at the first line that is not a hosts entry.
func Render(content []byte, entries []Entry) []byte {
	lines := strings.SplitAfter(string(content), "\n")
	if len(lines) > 0 && lines[len(lines)-1] == "" {
		lines = lines[:len(lines)-1]
	}
	var out strings.Builder
	inserted := false
	for i := 0; i < len(lines); i++ {
		if strings.TrimSpace(lines[i]) != BeginMarker {
			out.WriteString(lines[i])
			continue
		}
		// Skip the old block.
		j := i + 1
		for j < len(lines) && strings.TrimSpace(lines[j]) != EndMarker {
			j++
		}
		if j == len(lines) { // no end marker: the block ends at the first non-entry line
			j = i + 1
			for j < len(lines) && isEntry(lines[j]) {
				j++
			}
			j-- // the last block line
		}
		i = j
		if !inserted {
			writeBlock(&out, entries)
			inserted = true
		}
	}
	if !inserted && len(entries) > 0 {
		if s := out.String(); s != "" && !strings.HasSuffix(s, "\n") {
			out.WriteString("\n")
		}
		writeBlock(&out, entries)
	}
	return []byte(out.String())
}

func writeBlock(out *strings.Builder, entries []Entry) {
	if len(entries) == 0 {
		return
	}
	sorted := slices.Clone(entries)
	slices.SortFunc(sorted, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Hostname, b.Hostname), a.IP.Compare(b.IP))
	})
	sorted = slices.Compact(sorted)
	out.WriteString(BeginMarker + "\n")
	for _, e := range sorted {
		fmt.Fprintf(out, "%s\t%s\n", e.IP, e.Hostname)
	}
	out.WriteString(EndMarker + "\n")
}

// isEntry reports whether line is an "address name" hosts line.
func isEntry(line string) bool {
	f := strings.Fields(line)
	if len(f) < 2 {
		return false
	}
	_, err := netip.ParseAddr(f[0])
	return err == nil
}
