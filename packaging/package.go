package main

import (
	"bytes"
	"embed"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/goreleaser/nfpm/v2"
	"github.com/goreleaser/nfpm/v2/deb"
	"github.com/goreleaser/nfpm/v2/files"
	"github.com/goreleaser/nfpm/v2/rpm"
)

//go:embed systemd/*.service scripts/*.sh server.yaml copyright
var data embed.FS

// The installed layout. The plugin directory is osm-server's default
// (cmd/osm-server defaultPluginDir) when it exists.
const (
	pluginDir    = "/usr/lib/osm/plugins"
	serverUser   = "osm"
	serverData   = "/var/lib/osm"
	serverConfig = "/etc/osm/server.yaml"
	agentConfig  = "/etc/osm-agent"
	agentData    = "/var/lib/osm-agent"
	// providerAPI is the virtual package osm-server provides and every
	// provider package depends on: the plugin protocol version
	// (provider.Handshake's ProtocolVersion), as perl-base provides
	// perlapi-<v>. A server that speaks another version does not satisfy it.
	providerAPI = "osm-provider-api-1"
	maintainer  = "osm-vm maintainers <osm-vm@users.noreply.github.com>"
	homepage    = "https://github.com/osm-vm/osm-vm"
	license     = "LicenseRef-osm-vm"
)

// Build is one architecture's set of packages.
type Build struct {
	Version string
	// Arch is the GOARCH; nfpm maps it to each format's name.
	Arch string
	// BinDir holds osm-server, osm-agent and osm-provider-<name> built for
	// linux/Arch.
	BinDir    string
	Providers []string
	Formats   []string
	// Date is the changelog entry's date.
	Date time.Time
}

// scriptData fills the maintainer script templates in scripts/.
type scriptData struct {
	Name string
	// Unit is the package's systemd unit: enabled on install, restarted on
	// upgrade, stopped on removal.
	Unit string
	// User, DataDir and Config: the system user the package creates, its
	// 0700 state directory and the configuration file it may read.
	User, DataDir, Config string
	// Plugin marks a provider package; Notice says how to use it.
	Plugin bool
	Notice string
	// AgentNotice: say when an `osm-agent install` unit overrides ours.
	AgentNotice bool
	// Purge is deleted on dpkg --purge.
	Purge []string
}

// spec is one package, independent of format.
type spec struct {
	name, summary, description string
	contents                   files.Contents
	scripts                    scriptData
	provides                   []string
	depends                    map[string][]string // per format
}

func specs(b Build) []spec {
	bin := func(name string) string { return filepath.Join(b.BinDir, name) }
	out := []spec{
		{
			name:    "osm-server",
			summary: "osm-vm service mesh control plane",
			description: "osm-server runs the osm-vm control plane: provider plugins, the mesh\n" +
				"specification, the mesh CA, enrollment and xDS over mutual TLS. It runs\n" +
				"as the system user osm with its state in /var/lib/osm; provider packages\n" +
				"install their plugins into /usr/lib/osm/plugins.",
			contents: files.Contents{
				{Source: bin("osm-server"), Destination: "/usr/bin/osm-server", FileInfo: &files.ContentFileInfo{Mode: 0o755}},
				{Source: "systemd/osm-server.service", Destination: "UNITDIR/osm-server.service", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
				// 0640 root:osm: it may hold provider credentials. On Debian the
				// user exists only after unpacking, so postinst sets the group and mode.
				{Source: "server.yaml", Destination: serverConfig, Type: files.TypeConfigNoReplace, Packager: "deb", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
				{Source: "server.yaml", Destination: serverConfig, Type: files.TypeConfigNoReplace, Packager: "rpm", FileInfo: &files.ContentFileInfo{Mode: 0o640, Group: serverUser}},
				{Destination: pluginDir, Type: files.TypeDir, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
				// On RPM the user exists before the files (%pre), so the
				// package owns the data directory; dpkg creates it in postinst.
				{Destination: serverData, Type: files.TypeDir, Packager: "rpm", FileInfo: &files.ContentFileInfo{Mode: 0o700, Owner: serverUser, Group: serverUser}},
			},
			scripts:  scriptData{Unit: "osm-server.service", User: serverUser, DataDir: serverData, Config: serverConfig, Purge: []string{serverData, "/etc/osm"}},
			provides: []string{providerAPI},
			depends:  map[string][]string{"deb": {"adduser", "init-system-helpers (>= 1.54~)"}, "rpm": {"shadow-utils"}},
		},
		{
			name:    "osm-agent",
			summary: "osm-vm service mesh agent",
			description: "osm-agent joins a machine to the osm-vm service mesh and runs its proxy:\n" +
				"it enrolls with a join token, renews the proxy certificate and writes\n" +
				"the Envoy and gRPC xDS bootstraps. This package owns the osm-agent\n" +
				"unit; 'osm-agent install' writes /etc/osm-agent/agent.yaml, and the\n" +
				"unit starts once that file exists.",
			contents: files.Contents{
				{Source: bin("osm-agent"), Destination: "/usr/bin/osm-agent", FileInfo: &files.ContentFileInfo{Mode: 0o755}},
				{Source: "systemd/osm-agent.service", Destination: "UNITDIR/osm-agent.service", FileInfo: &files.ContentFileInfo{Mode: 0o644}},
			},
			scripts: scriptData{Unit: "osm-agent.service", AgentNotice: true, Purge: []string{agentConfig, agentData}},
			depends: map[string][]string{"deb": {"init-system-helpers (>= 1.54~)"}},
		},
	}
	for _, p := range b.Providers {
		name := providerBinary(p)
		out = append(out, spec{
			name:    name,
			summary: fmt.Sprintf("osm-vm endpoints provider plugin %q", p),
			description: fmt.Sprintf("The %s endpoints provider for osm-server, installed into its plugin\n"+
				"directory %s. Name it in /etc/osm/server.yaml's providers\n"+
				"and restart osm-server to use it.", p, pluginDir),
			contents: files.Contents{
				{Source: bin(name), Destination: pluginDir + "/" + name, FileInfo: &files.ContentFileInfo{Mode: 0o755}},
			},
			scripts: scriptData{Plugin: true, Notice: providerNotice(p)},
			depends: map[string][]string{"deb": {providerAPI}, "rpm": {providerAPI}},
		})
	}
	return out
}

// providerNotice is what a provider package prints on first install:
// osm-server starts the plugins its configuration names, at its start.
func providerNotice(p string) string {
	return fmt.Sprintf(`%[1]s is installed in %[2]s.
osm-server runs the providers its configuration names, when it starts. To use
this one, add it to /etc/osm/server.yaml (docs/plugins/%[3]s.md has its config):
  providers:
    - name: %[3]s
      plugin: %[1]s
      config: {...}
and restart the server: systemctl restart osm-server`, providerBinary(p), pluginDir, p)
}

// writePackages writes every package of b in each format into out and
// returns their paths.
func writePackages(b Build, out string) ([]string, error) {
	if err := os.MkdirAll(out, 0o755); err != nil {
		return nil, err
	}
	work, err := os.MkdirTemp("", "osm-packaging-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(work)
	if err := os.CopyFS(work, data); err != nil {
		return nil, err
	}
	var paths []string
	for _, s := range specs(b) {
		for _, format := range b.Formats {
			p, err := writePackage(b, s, format, work, out)
			if err != nil {
				return nil, fmt.Errorf("%s %s for %s: %w", s.name, format, b.Arch, err)
			}
			paths = append(paths, p)
		}
	}
	return paths, nil
}

func writePackage(b Build, s spec, format, work, out string) (string, error) {
	var packager nfpm.Packager
	unitDir := "/lib/systemd/system" // Debian 12's unit directory
	switch format {
	case "deb":
		packager = deb.Default
	case "rpm":
		packager = rpm.DefaultRPM
		unitDir = "/usr/lib/systemd/system"
	default:
		return "", fmt.Errorf("unknown package format %q (want deb or rpm)", format)
	}
	sd := s.scripts
	sd.Name = s.name
	scripts, err := renderScripts(sd, format, filepath.Join(work, s.name+"-"+format))
	if err != nil {
		return "", err
	}
	var contents files.Contents
	for _, c := range s.contents {
		c := *c
		info := *c.FileInfo
		c.FileInfo = &info
		if c.Destination == "UNITDIR/"+filepath.Base(c.Destination) {
			c.Destination = unitDir + "/" + filepath.Base(c.Destination)
		}
		if c.Source != "" && !filepath.IsAbs(c.Source) {
			c.Source = filepath.Join(work, c.Source)
		}
		contents = append(contents, &c)
	}
	if format == "deb" {
		extra, err := debianDocs(b, s, filepath.Join(work, s.name+"-"+format))
		if err != nil {
			return "", err
		}
		contents = append(contents, extra...)
	}
	info := &nfpm.Info{
		Name:          s.name,
		Arch:          b.Arch,
		Platform:      "linux",
		Version:       b.Version,
		VersionSchema: "none",
		Release:       "1",
		Section:       "net",
		Priority:      "optional",
		Maintainer:    maintainer,
		Description:   s.summary + "\n" + s.description,
		Vendor:        "osm-vm",
		Homepage:      homepage,
		License:       license,
		Overridables: nfpm.Overridables{
			Provides: s.provides,
			Depends:  s.depends[format],
			Contents: contents,
			Scripts:  scripts.common,
			RPM:      nfpm.RPM{Summary: s.summary, Group: "System Environment/Daemons"},
		},
	}
	if format == "deb" {
		info.Release = "" // a native package: no Debian revision
		info.License = "" // not a field of a Debian control file; the copyright file says it
	}
	info = nfpm.WithDefaults(info)
	if err := nfpm.PrepareForPackager(info, format); err != nil {
		return "", err
	}
	name := packager.ConventionalFileName(info)
	path := filepath.Join(out, name)
	var buf bytes.Buffer
	if err := packager.Package(info, &buf); err != nil {
		return "", err
	}
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		return "", err
	}
	return path, nil
}

type renderedScripts struct{ common nfpm.Scripts }

// renderScripts fills format's script templates with sd into dir and
// returns their paths in nfpm's terms (nfpm maps preinstall to %pre and
// preinst, and so on).
func renderScripts(sd scriptData, format, dir string) (renderedScripts, error) {
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return renderedScripts{}, err
	}
	names := map[string]*string{}
	var r renderedScripts
	switch format {
	case "deb":
		names["deb-postinst.sh"] = &r.common.PostInstall
		names["deb-prerm.sh"] = &r.common.PreRemove
		names["deb-postrm.sh"] = &r.common.PostRemove
	case "rpm":
		names["rpm-pre.sh"] = &r.common.PreInstall
		names["rpm-post.sh"] = &r.common.PostInstall
		names["rpm-preun.sh"] = &r.common.PreRemove
		names["rpm-postun.sh"] = &r.common.PostRemove
	}
	for file, dst := range names {
		src, err := fs.ReadFile(data, "scripts/"+file)
		if err != nil {
			return r, err
		}
		t, err := template.New(file).Option("missingkey=error").Parse(string(src))
		if err != nil {
			return r, err
		}
		var out bytes.Buffer
		if err := t.Execute(&out, sd); err != nil {
			return r, err
		}
		path := filepath.Join(dir, file)
		if !hasCommands(out.String()) {
			continue // an empty maintainer script is noise (lintian says so)
		}
		if err := os.WriteFile(path, out.Bytes(), 0o755); err != nil {
			return r, err
		}
		*dst = path
	}
	return r, nil
}

// hasCommands reports whether a shell script does anything beyond
// comments, `set -e` and `exit 0`.
func hasCommands(script string) bool {
	for _, line := range strings.Split(script, "\n") {
		line = strings.TrimSpace(line)
		if line != "" && !strings.HasPrefix(line, "#") && line != "set -e" && line != "exit 0" {
			return true
		}
	}
	return false
}
