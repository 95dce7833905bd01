#!/bin/sh
# Installs the Node.js packages of examples/bookstore/node (grpc-js and
# grpc-js-xds, pinned by its committed package-lock.json) with `npm ci` into
# the cache, keyed by the lockfile's hash, once; prints the node_modules
# directory on the last line (for NODE_PATH / OSM_NODE_MODULES).
set -eu
cd "$(dirname "$0")/.."
cache="${CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/osm-vm}"
src=examples/bookstore/node
key=$(cat "$src/package.json" "$src/package-lock.json" | sha256sum | cut -c1-16)
dir="$cache/node-$key"
if [ ! -f "$dir/.done" ]; then
	command -v npm >/dev/null || { echo "npm is missing: make test-deps installs Debian's nodejs and npm" >&2; exit 1; }
	echo "npm ci $src into $dir" >&2
	rm -rf "$dir"
	mkdir -p "$dir"
	cp "$src/package.json" "$src/package-lock.json" "$dir/"
	(cd "$dir" && npm ci --no-audit --no-fund --ignore-scripts >&2)
	touch "$dir/.done"
fi
echo "$dir/node_modules"
