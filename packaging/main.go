// Command packaging builds osm-vm's Linux packages with nfpm (as a
// library): a .deb and an .rpm per architecture of osm-server, osm-agent
// and one osm-provider-<name> per providers/<name>. It is a build tool,
// run by `make packages` (go run ./packaging), never shipped.
//
// What goes into each package and its maintainer scripts is data in this
// directory: the systemd units in systemd/, the scripts in scripts/ (text
// templates, one set for Debian and one for Fedora conventions), the
// server's default configuration server.yaml and the copyright file.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"time"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	err := run(ctx, os.Args[1:], os.Stdout)
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "packaging:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, args []string, stdout io.Writer) error {
	fs := flag.NewFlagSet("packaging", flag.ContinueOnError)
	out := fs.String("out", "dist", "directory for the packages")
	archs := fs.String("arch", "amd64,arm64", "comma-separated GOARCH values to build for")
	formats := fs.String("format", "deb,rpm", "comma-separated package formats: deb, rpm")
	version := fs.String("version", "", "package version (default: from `git describe`)")
	repo := fs.String("repo", ".", "the osm-vm source tree")
	if err := fs.Parse(args); err != nil {
		return err
	}
	v := *version
	if v == "" {
		var err error
		if v, err = gitVersion(ctx, *repo); err != nil {
			return err
		}
	} else if err := checkVersion(v); err != nil {
		return err
	}
	providers, err := providerNames(*repo)
	if err != nil {
		return err
	}
	for _, arch := range strings.Split(*archs, ",") {
		bin, err := os.MkdirTemp("", "osm-packaging-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(bin)
		if err := buildBinaries(ctx, *repo, arch, v, bin, providers); err != nil {
			return err
		}
		paths, err := writePackages(Build{Version: v, Arch: arch, BinDir: bin, Providers: providers, Formats: strings.Split(*formats, ","), Date: time.Now()}, *out)
		if err != nil {
			return err
		}
		for _, p := range paths {
			fmt.Fprintln(stdout, p)
		}
	}
	return nil
}

// providerNames lists providers/<name>: each becomes osm-provider-<name>.
func providerNames(repo string) ([]string, error) {
	entries, err := os.ReadDir(filepath.Join(repo, "providers"))
	if err != nil {
		return nil, fmt.Errorf("list providers (is --repo the osm-vm source tree?): %w", err)
	}
	var names []string
	for _, e := range entries {
		if e.IsDir() {
			names = append(names, e.Name())
		}
	}
	if len(names) == 0 {
		return nil, errors.New("no providers/<name> directories: is --repo the osm-vm source tree?")
	}
	return names, nil
}

// buildBinaries cross-builds osm-server, osm-agent and every provider for
// linux/arch into dir: static (CGO_ENABLED=0), trimmed paths, stripped,
// with the package version in `version`.
func buildBinaries(ctx context.Context, repo, arch, version, dir string, providers []string) error {
	targets := map[string]string{"osm-server": "./cmd/osm-server", "osm-agent": "./cmd/osm-agent"}
	for _, p := range providers {
		targets[providerBinary(p)] = "./providers/" + p
	}
	for name, pkg := range targets {
		cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags", "-s -w -X main.version="+version, "-o", filepath.Join(dir, name), pkg)
		cmd.Dir = repo
		cmd.Env = append(os.Environ(), "GOOS=linux", "GOARCH="+arch, "CGO_ENABLED=0")
		if out, err := cmd.CombinedOutput(); err != nil {
			return fmt.Errorf("go build %s for linux/%s: %w\n%s", pkg, arch, err, out)
		}
	}
	return nil
}

func providerBinary(name string) string { return "osm-provider-" + name }
