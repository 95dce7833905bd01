#!/bin/sh
# Prints the path of a Debian root tarball (debootstrap minbase of SUITE,
# default bookworm, with what the package tests need: adduser, systemd for
# systemd-analyze, curl for the one-line join), made once and cached under
# ~/.cache/osm-vm keyed by suite and package list. Needs root and debootstrap.
set -eu
suite=${1:-bookworm}
mirror=${DEBIAN_MIRROR:-http://deb.debian.org/debian}
include=adduser,systemd,curl,ca-certificates,init-system-helpers
cache=${XDG_CACHE_HOME:-$HOME/.cache}/osm-vm
key=$(printf '%s' "$include" | sha256sum | cut -c1-8)
out=$cache/debian-root-$suite-$key.tar.gz
if [ -s "$out" ]; then echo "$out"; exit 0; fi
command -v debootstrap >/dev/null || { echo "debootstrap is missing: apt-get install debootstrap (make test-deps does)" >&2; exit 1; }
mkdir -p "$cache"
work=$(mktemp -d "$cache/debootstrap.XXXXXX")
trap 'rm -rf "$work"' EXIT
echo "debootstrap $suite into $work (once; cached as $out)" >&2
debootstrap --variant=minbase --include="$include" "$suite" "$work/root" "$mirror" >&2
rm -rf "$work/root/var/cache/apt/archives/"*.deb
tar -C "$work/root" -czf "$out.tmp" .
mv "$out.tmp" "$out"
echo "$out"
