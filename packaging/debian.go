package main

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/goreleaser/nfpm/v2/files"
)

// lintianOverrides are the lintian tags every Debian package of ours
// overrides, each with the reason lintian shows next to it.
var lintianOverrides = []struct{ tag, why string }{
	{"statically-linked-binary", "Go binaries are statically linked on purpose (CGO_ENABLED=0), so one package runs on every glibc; lintian exempts Go only when it sees a source package that build-depends on golang-go, and these packages are built from the Go tree directly."},
	{"no-manual-page", "The commands document themselves (--help on every subcommand) and docs/operator-guide.md; there are no man pages yet."},
}

// debianDocs writes what Debian policy wants in /usr/share/doc/<name>
// (copyright; changelog.gz, a native package's changelog, gzip -9n) and
// the lintian overrides into dir and returns them as package contents.
func debianDocs(b Build, s spec, dir string) (files.Contents, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	changelog := fmt.Sprintf("%s (%s) unstable; urgency=medium\n\n  * Built from the osm-vm source tree; its git history lists the changes.\n\n -- %s  %s\n",
		s.name, b.Version, maintainer, b.Date.UTC().Format("Mon, 02 Jan 2006 15:04:05 -0700"))
	var gz bytes.Buffer
	w, err := gzip.NewWriterLevel(&gz, gzip.BestCompression)
	if err != nil {
		return nil, err
	}
	if _, err := w.Write([]byte(changelog)); err != nil {
		return nil, err
	}
	if err := w.Close(); err != nil {
		return nil, err
	}
	var ov strings.Builder
	for _, o := range lintianOverrides {
		if o.tag == "statically-linked-binary" && strings.HasSuffix(s.name, "-static") {
			continue // lintian exempts packages named *-static itself
		}
		fmt.Fprintf(&ov, "# %s\n%s: %s\n", o.why, s.name, o.tag)
	}
	docs := map[string][]byte{
		"changelog.gz": gz.Bytes(),
		"overrides":    []byte(ov.String()),
	}
	for name, content := range docs {
		if err := os.WriteFile(filepath.Join(dir, name), content, 0o644); err != nil {
			return nil, err
		}
	}
	doc := "/usr/share/doc/" + s.name
	mode := &files.ContentFileInfo{Mode: 0o644}
	return files.Contents{
		{Source: filepath.Join(filepath.Dir(dir), "copyright"), Destination: doc + "/copyright", FileInfo: mode},
		{Source: filepath.Join(dir, "changelog.gz"), Destination: doc + "/changelog.gz", FileInfo: mode},
		{Source: filepath.Join(dir, "overrides"), Destination: "/usr/share/lintian/overrides/" + s.name, FileInfo: mode},
	}, nil
}
