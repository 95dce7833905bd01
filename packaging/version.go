package main

import (
	"context"
	"fmt"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
)

// gitVersion is the package version of the source tree at repo, from git:
// the newest v<semver> tag reachable, or 0.0.0 when there is none, with
// "+git<commits since>.g<hash>" after it when HEAD is not the tag and
// ".dirty" when the tree has changes. Versions of later commits sort
// after earlier ones for dpkg and rpm alike (commits since grows).
func gitVersion(ctx context.Context, repo string) (string, error) {
	git := func(args ...string) (string, error) {
		cmd := exec.CommandContext(ctx, "git", args...)
		cmd.Dir = repo
		out, err := cmd.Output()
		return strings.TrimSpace(string(out)), err
	}
	hash, err := git("rev-parse", "--short=12", "HEAD")
	if err != nil {
		return "", fmt.Errorf("git rev-parse HEAD in %s (pass --version without git): %w", repo, err)
	}
	status, err := git("status", "--porcelain", "--untracked-files=no")
	if err != nil {
		return "", fmt.Errorf("git status: %w", err)
	}
	tag, since := "", 0
	if desc, err := git("describe", "--tags", "--match", "v[0-9]*", "--abbrev=0"); err == nil {
		tag = desc
		n, err := git("rev-list", "--count", desc+"..HEAD")
		if err != nil {
			return "", fmt.Errorf("git rev-list %s..HEAD: %w", desc, err)
		}
		since, _ = strconv.Atoi(n)
	} else {
		n, err := git("rev-list", "--count", "HEAD")
		if err != nil {
			return "", fmt.Errorf("git rev-list HEAD: %w", err)
		}
		since, _ = strconv.Atoi(n)
	}
	return packageVersion(tag, since, hash, status != ""), nil
}

// packageVersion composes gitVersion's result from its parts.
func packageVersion(tag string, since int, hash string, dirty bool) string {
	v := strings.TrimPrefix(tag, "v")
	if v == "" {
		v = "0.0.0"
	}
	if since > 0 || tag == "" {
		v += fmt.Sprintf("+git%d.g%s", since, hash)
	}
	if dirty {
		if !strings.Contains(v, "+") {
			v += "+"
		} else {
			v += "."
		}
		v += "dirty"
	}
	return v
}

// versionRE is what both dpkg and rpm accept as an upstream version here:
// starts with a digit, no '-' (rpm's separator) and no ':' (an epoch).
var versionRE = regexp.MustCompile(`^[0-9][A-Za-z0-9.+~]*$`)

func checkVersion(v string) error {
	if !versionRE.MatchString(v) {
		return fmt.Errorf("--version %q: want a version that starts with a digit and holds only letters, digits, '.', '+' and '~' (dpkg and rpm both accept it)", v)
	}
	return nil
}
