#!/bin/sh
# osm-vm join script, served by osm-server at /join/install.sh to the line
# `osm-server token create` prints. That line has already checked the mesh
# CA (--ca-file) against its hash; this script trusts only that CA. It
# installs the osm-agent package for this machine from the server, enrolls
# with the join token (osm-agent pins the CA's key again) and starts the
# agent where systemd runs. Every other flag goes to `osm-agent install`.
# Every failed step exits non-zero with a message naming it.
set -eu

fail() { echo "osm-vm join: $*" >&2; exit 1; }

ca= server= prev=
args=
for a in "$@"; do
	case $prev in
	--ca-file) ca=$a; prev=; continue ;;
	--server) server=$a ;;
	esac
	prev=
	case $a in
	--ca-file) prev=--ca-file; continue ;;
	--ca-file=*) ca=${a#--ca-file=}; continue ;;
	--server) prev=--server ;;
	--server=*) server=${a#--server=} ;;
	esac
	args="$args '$(printf '%s' "$a" | sed "s/'/'\\\\''/g")'"
done
[ -n "$ca" ] && [ -f "$ca" ] || fail "--ca-file: the pinned mesh CA is missing (paste the whole line from 'osm-server token create')"
[ -n "$server" ] || fail "--server is missing (paste the whole line from 'osm-server token create')"
[ "$(id -u)" = 0 ] || fail "run as root: it installs a package and a system service"

if command -v dpkg >/dev/null 2>&1; then
	format=deb arch=$(dpkg --print-architecture)
elif command -v rpm >/dev/null 2>&1; then
	format=rpm arch=$(uname -m)
else
	fail "neither dpkg nor rpm here: install osm-agent by hand (docs/operator-guide.md, 'Install by hand')"
fi

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
pkg=$tmp/osm-agent.$format
echo "osm-vm join: downloading osm-agent ($format, $arch) from $server"
# A busy server refuses a download with 503 or 429 and Retry-After (its
# bounds on concurrent downloads); curl waits that long and tries again.
curl -fsS --retry 30 --retry-max-time 900 --cacert "$ca" -o "$pkg" "$server/join/packages/osm-agent.$format?arch=$arch" ||
	fail "no osm-agent package for $format/$arch from $server (the server's log says why)"
if [ "$format" = deb ]; then
	dpkg -i "$pkg" >/dev/null || fail "installing the osm-agent package failed (dpkg says why above)"
else
	rpm -U --replacepkgs "$pkg" || fail "installing the osm-agent package failed (rpm says why above)"
fi

eval "set -- $args"
osm-agent install --enroll "$@" || fail "enrolling with $server failed (osm-agent says why above); the package stays installed: run the line again (with a new token from 'osm-server token create' if the server refused this one)"
if [ -d /run/systemd/system ]; then
	systemctl enable --now osm-agent.service || fail "starting osm-agent.service failed (journalctl -u osm-agent says why)"
	echo "osm-vm join: osm-agent is running (systemctl status osm-agent)"
else
	echo "osm-vm join: no systemd here: run 'osm-agent run --config /etc/osm-agent/agent.yaml' under your supervisor"
fi
