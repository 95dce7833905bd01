//go:build debroot

// The package suite (make test runs it; it needs root, lintian, rpm, and
// OSM_DEBIAN_ROOT, a Debian 12 root tarball from hack/debian-root.sh):
// lintian on every .deb, rpm -qpi/-qlp on every .rpm, then in a real
// Debian root (chroot): install an older build, upgrade to a newer one,
// check files, owners, modes, the user and that the configuration survives,
// systemd-analyze verify on the installed units, remove, purge, and finally
// the one-line join that `osm-server token create` prints, pasted as
// printed, against a real osm-server.
package main

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/osm-vm/osm-vm/internal/testaddr"
)

func TestPackagesInDebian(t *testing.T) {
	tarball := os.Getenv("OSM_DEBIAN_ROOT")
	if tarball == "" {
		t.Fatal("OSM_DEBIAN_ROOT is unset: set it to the tarball hack/debian-root.sh prints (make test does)")
	}
	if os.Geteuid() != 0 {
		t.Fatal("this suite installs packages in a chroot: run it as root")
	}
	ctx := t.Context()
	repo, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	providers, err := providerNames(repo)
	if err != nil {
		t.Fatal(err)
	}
	bin := t.TempDir()
	if err := buildBinaries(ctx, repo, "amd64", "1.0.1", bin, providers); err != nil {
		t.Fatal(err)
	}
	oldDir, newDir := t.TempDir(), t.TempDir()
	// The older build differs in version only: what is checked is what the
	// packages do on an upgrade.
	if _, err := writePackages(Build{Version: "1.0.0", Arch: "amd64", BinDir: bin, Providers: providers, Formats: []string{"deb"}, Date: time.Now()}, oldDir); err != nil {
		t.Fatal(err)
	}
	newPkgs, err := writePackages(Build{Version: "1.0.1", Arch: "amd64", BinDir: bin, Providers: providers, Formats: []string{"deb", "rpm"}, Date: time.Now()}, newDir)
	if err != nil {
		t.Fatal(err)
	}
	names := append([]string{"osm-server", "osm-agent"}, mapNames(providers, providerBinary)...)

	t.Run("lintian", func(t *testing.T) {
		debs, _ := filepath.Glob(filepath.Join(newDir, "*.deb"))
		out, _ := exec.CommandContext(ctx, "lintian", append([]string{"--tag-display-limit", "0"}, debs...)...).CombinedOutput()
		for _, line := range strings.Split(string(out), "\n") {
			if strings.HasPrefix(line, "E: ") {
				t.Errorf("lintian: %s", line)
			}
		}
		if len(debs) != len(names) {
			t.Errorf("%d .deb files, want %d (%v)", len(debs), len(names), names)
		}
	})

	t.Run("rpm", func(t *testing.T) {
		want := map[string][]string{
			"osm-server":          {"/usr/bin/osm-server", "/usr/lib/systemd/system/osm-server.service", "/etc/osm/server.yaml", "/var/lib/osm", "/usr/lib/osm/plugins"},
			"osm-agent":           {"/usr/bin/osm-agent", "/usr/lib/systemd/system/osm-agent.service"},
			"osm-provider-static": {"/usr/lib/osm/plugins/osm-provider-static"},
		}
		for _, p := range newPkgs {
			if !strings.HasSuffix(p, ".rpm") {
				continue
			}
			info := sh(t, "rpm", "-qpi", p)
			name := regexp.MustCompile(`(?m)^Name\s*:\s*(\S+)`).FindStringSubmatch(info)
			if name == nil || !strings.Contains(info, "Version     : 1.0.1") {
				t.Errorf("rpm -qpi %s: no name or not version 1.0.1:\n%s", p, info)
				continue
			}
			files := sh(t, "rpm", "-qlp", p)
			for _, f := range want[name[1]] {
				if !strings.Contains(files, f+"\n") {
					t.Errorf("rpm -qlp %s lacks %s:\n%s", p, f, files)
				}
			}
			if strings.HasPrefix(name[1], "osm-provider-") && !strings.Contains(sh(t, "rpm", "-qpR", p), providerAPI) {
				t.Errorf("%s does not require %s", p, providerAPI)
			}
		}
		if got := sh(t, "rpm", "-qlvp", glob1(t, newDir, "osm-server-*.rpm")); !regexp.MustCompile(`drwx------\s+\d+\s+osm\s+osm\s.*/var/lib/osm\n`).MatchString(got) {
			t.Errorf("osm-server.rpm: /var/lib/osm is not drwx------ osm osm:\n%s", got)
		}
	})

	root := t.TempDir()
	sh(t, "tar", "-C", root, "-xzf", tarball)
	in := func(args ...string) string { return sh(t, append([]string{"chroot", root}, args...)...) }
	debsOf := func(dir string) []string {
		var out []string
		for _, n := range names {
			src := glob1(t, dir, n+"_*.deb")
			dst := filepath.Join(root, "tmp", filepath.Base(src))
			sh(t, "cp", src, dst)
			out = append(out, "/tmp/"+filepath.Base(src))
		}
		return out
	}

	t.Run("install", func(t *testing.T) {
		out := in(append([]string{"dpkg", "-i"}, debsOf(oldDir)...)...)
		// osm-server starts the plugins it names at its start: each provider
		// package says how to use it.
		for _, p := range providers {
			if want := "plugin: " + providerBinary(p); !strings.Contains(out, want) || !strings.Contains(out, "systemctl restart osm-server") {
				t.Errorf("installing %s did not say how to use it (%q and a restart):\n%s", providerBinary(p), want, out)
			}
		}
		checkMode(t, root, "/usr/bin/osm-server", "-rwxr-xr-x root root")
		checkMode(t, root, "/usr/bin/osm-agent", "-rwxr-xr-x root root")
		checkMode(t, root, "/var/lib/osm", "drwx------ osm osm")
		checkMode(t, root, "/etc/osm/server.yaml", "-rw-r----- root osm")
		checkMode(t, root, "/usr/lib/osm/plugins", "drwxr-xr-x root root")
		for _, p := range providers {
			checkMode(t, root, "/usr/lib/osm/plugins/"+providerBinary(p), "-rwxr-xr-x root root")
		}
		if got := in("getent", "passwd", "osm"); !strings.Contains(got, ":/var/lib/osm:/usr/sbin/nologin") {
			t.Errorf("user osm: %q, want a system user with home /var/lib/osm and no login shell", got)
		}
		for _, unit := range []string{"osm-server.service", "osm-agent.service"} {
			if _, err := os.Lstat(filepath.Join(root, "etc/systemd/system/multi-user.target.wants", unit)); err != nil {
				t.Errorf("%s not enabled on install: %v", unit, err)
			}
		}
		// The operator's edit, which upgrades and removal must keep.
		appendFile(t, filepath.Join(root, "etc/osm/server.yaml"), "# edited by the operator\n")
	})

	t.Run("upgrade", func(t *testing.T) {
		in(append([]string{"dpkg", "-i"}, debsOf(newDir)...)...)
		for _, n := range names {
			if got := in("dpkg-query", "-W", "-f", "${Version} ${db:Status-Abbrev}", n); got != "1.0.1 ii " {
				t.Errorf("%s after the upgrade: %q, want 1.0.1 installed", n, got)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(root, "etc/osm/server.yaml")); !strings.Contains(string(b), "# edited by the operator") {
			t.Error("the upgrade overwrote the operator's /etc/osm/server.yaml")
		}
		checkMode(t, root, "/etc/osm/server.yaml", "-rw-r----- root osm")
		checkMode(t, root, "/var/lib/osm", "drwx------ osm osm")
	})

	t.Run("systemd-analyze verify", func(t *testing.T) {
		out, err := exec.CommandContext(ctx, "chroot", root, "systemd-analyze", "verify", "--man=no",
			"/lib/systemd/system/osm-server.service", "/lib/systemd/system/osm-agent.service").CombinedOutput()
		if err != nil || strings.TrimSpace(string(out)) != "" {
			t.Errorf("systemd-analyze verify the installed units: %v\n%s", err, out)
		}
	})

	t.Run("remove keeps configuration and data", func(t *testing.T) {
		os.WriteFile(filepath.Join(root, "var/lib/osm/state"), []byte("x"), 0o600)
		in(append([]string{"dpkg", "-r"}, names...)...)
		for _, gone := range []string{"/usr/bin/osm-server", "/usr/bin/osm-agent", "/usr/lib/osm/plugins/osm-provider-static"} {
			if _, err := os.Stat(filepath.Join(root, gone)); err == nil {
				t.Errorf("%s is still there after dpkg -r", gone)
			}
		}
		if b, _ := os.ReadFile(filepath.Join(root, "etc/osm/server.yaml")); !strings.Contains(string(b), "# edited by the operator") {
			t.Error("dpkg -r lost the operator's /etc/osm/server.yaml")
		}
		if _, err := os.Stat(filepath.Join(root, "var/lib/osm/state")); err != nil {
			t.Errorf("dpkg -r lost the data in /var/lib/osm: %v", err)
		}
	})

	t.Run("purge deletes them", func(t *testing.T) {
		in(append([]string{"dpkg", "--purge"}, names...)...)
		for _, gone := range []string{"/etc/osm", "/var/lib/osm", "/etc/systemd/system/multi-user.target.wants/osm-server.service", "/etc/systemd/system/osm-server.service"} {
			if _, err := os.Lstat(filepath.Join(root, gone)); err == nil {
				t.Errorf("%s is still there after dpkg --purge", gone)
			}
		}
	})

	t.Run("one-line join", func(t *testing.T) {
		line := startJoinServer(t, filepath.Join(bin, "osm-server"), newDir)
		// A token the server refuses stops the line at the enrollment,
		// after the package's install, with a non-zero status naming the
		// step (run by Debian's /bin/sh, dash, which has no pipefail).
		refused := regexp.MustCompile(`--token [0-9a-f]+`).ReplaceAllString(line, "--token "+strings.Repeat("0", 64))
		if refused == line {
			t.Fatalf("no --token in the line: %s", line)
		}
		out, err := exec.CommandContext(ctx, "chroot", root, "/bin/sh", "-c", refused).CombinedOutput()
		if err == nil || !strings.Contains(string(out), "osm-vm join: enrolling with") || !strings.Contains(string(out), "step 4 of 4 failed") {
			t.Errorf("the line with a refused token: %v, want a non-zero status naming the enrollment\n%s", err, out)
		}
		out, err = exec.CommandContext(ctx, "chroot", root, "/bin/sh", "-c", line).CombinedOutput()
		if err != nil {
			t.Fatalf("the join line failed: %v\n%s\nline: %s", err, out, line)
		}
		if !strings.Contains(string(out), "Enrolled as ") {
			t.Errorf("the join line did not enroll:\n%s", out)
		}
		checkMode(t, root, "/var/lib/osm-agent/proxy.key", "-rw------- root root")
		if got := in("dpkg-query", "-W", "-f", "${Version}", "osm-agent"); got != "1.0.1" {
			t.Errorf("osm-agent after the join: %q, want 1.0.1 from the server", got)
		}
		if b, err := os.ReadFile(filepath.Join(root, "etc/osm-agent/agent.yaml")); err != nil || !strings.Contains(string(b), "service: bookstore") {
			t.Errorf("agent.yaml after the join: %v\n%s", err, b)
		}
		// The line is pinned: a wrong CA hash stops it before anything is
		// downloaded or installed.
		bad := regexp.MustCompile(`echo "[0-9a-f]{64}`).ReplaceAllString(line, `echo "`+strings.Repeat("0", 64))
		if out, err := exec.CommandContext(ctx, "chroot", root, "/bin/sh", "-c", bad).CombinedOutput(); err == nil || strings.Contains(string(out), "downloading") || !strings.Contains(string(out), "step 2 of 4 failed") {
			t.Errorf("the line with a wrong CA hash: %v, want a non-zero status naming the CA check and nothing downloaded\n%s", err, out)
		}
	})
}

// startJoinServer runs osm-server on loopback with agentPackageDir holding
// the packages in pkgDir and returns the line `token create` prints.
func startJoinServer(t *testing.T, server, pkgDir string) string {
	dir := t.TempDir()
	api, xds, debug := freePort(t), freePort(t), freePort(t)
	cfg := fmt.Sprintf("dataDir: %s\npluginDir: %s\napiAddress: %s\nxdsAddress: %s\ndebugAddress: %s\nagentPackageDir: %s\n",
		filepath.Join(dir, "data"), dir, api, xds, debug, pkgDir)
	os.WriteFile(filepath.Join(dir, "server.yaml"), []byte(cfg), 0o644)
	cmd := exec.Command(server, "serve", "--config", filepath.Join(dir, "server.yaml"))
	logf, _ := os.Create(filepath.Join(dir, "server.log"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
		if t.Failed() {
			b, _ := os.ReadFile(filepath.Join(dir, "server.log"))
			t.Logf("osm-server log:\n%s", b)
		}
	})
	ctx, cancel := context.WithTimeout(t.Context(), 60*time.Second)
	defer cancel()
	for {
		out, err := exec.CommandContext(ctx, server, "token", "create", "--service", "bookstore",
			"--server", "https://"+api, "--data-dir", filepath.Join(dir, "data")).Output()
		if err == nil {
			return strings.TrimSpace(string(out))
		}
		select {
		case <-ctx.Done():
			t.Fatalf("osm-server token create never succeeded: %v", err)
		case <-time.After(100 * time.Millisecond): // polling a condition: the server being up
		}
	}
}

func freePort(t *testing.T) string {
	t.Helper()
	return testaddr.Free(t)
}

func sh(t *testing.T, args ...string) string {
	t.Helper()
	cmd := exec.CommandContext(t.Context(), args[0], args[1:]...)
	cmd.Stdin = nil // a prompt (a conffile question) fails instead of hanging
	out, err := cmd.Output()
	if err != nil {
		stderr := ""
		if ee, ok := err.(*exec.ExitError); ok {
			stderr = string(ee.Stderr)
		}
		t.Fatalf("%s: %v\n%s%s", strings.Join(args, " "), err, out, stderr)
	}
	return string(out)
}

// checkMode compares `stat` of path in root with "<mode> <owner> <group>".
func checkMode(t *testing.T, root, path, want string) {
	t.Helper()
	out, err := exec.Command("chroot", root, "stat", "-c", "%A %U %G", path).CombinedOutput()
	if got := strings.TrimSpace(string(out)); err != nil || got != want {
		t.Errorf("%s: %q (%v), want %q", path, got, err, want)
	}
}

func glob1(t *testing.T, dir, pattern string) string {
	t.Helper()
	m, _ := filepath.Glob(filepath.Join(dir, pattern))
	if len(m) != 1 {
		t.Fatalf("%s in %s: %v, want exactly one", pattern, dir, m)
	}
	return m[0]
}

func appendFile(t *testing.T, path, s string) {
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	w.WriteString(s)
	if err := w.Flush(); err != nil {
		t.Fatal(err)
	}
}

func mapNames(in []string, f func(string) string) []string {
	out := make([]string, len(in))
	for i, s := range in {
		out[i] = f(s)
	}
	return out
}
