#!/usr/bin/env bash
# install-playwright.sh installs the browser test's npm packages
# (e2e/browser/package-lock.json: playwright-core) with `npm ci` into a
# cache directory outside the repository, keyed by the lockfile's hash, and
# prints the directory holding node_modules. Chromium itself is Debian's
# (/usr/bin/chromium, installed by `make test-deps`); playwright-core
# downloads no browser.
#
#   hack/install-playwright.sh      # installs when missing, prints the directory
#
# Environment:
#   OSM_PLAYWRIGHT_DIR  where the packages go
#                       (default ${XDG_CACHE_HOME:-$HOME/.cache}/osm-vm/playwright-<lock hash>)
set -euo pipefail

here=$(cd "$(dirname "$0")/.." && pwd)
lock="$here/e2e/browser/package-lock.json"
hash=$(sha256sum "$lock" | cut -c1-16)
DIR=${OSM_PLAYWRIGHT_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/osm-vm/playwright-$hash}

log() { echo "install-playwright: $*" >&2; }

mkdir -p "$DIR"
exec 9>"$DIR/.lock"
flock 9
if [[ -d "$DIR/node_modules/playwright-core" ]]; then
	log "playwright-core present: $DIR"
	echo "$DIR"
	exit 0
fi
command -v npm >/dev/null || { log "npm not found: install Debian's npm (make test-deps does)"; exit 1; }
cp "$here/e2e/browser/package.json" "$lock" "$DIR/"
log "npm ci into $DIR"
(cd "$DIR" && PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1 npm ci --ignore-scripts --no-audit --no-fund >&2)
echo "$DIR"
