#!/usr/bin/env bash
# build-consul.sh builds Consul from the Go module proxy into a cache
# directory outside the repository, once per version, for the tests that
# need a real Consul (the Consul KV store backend and the Consul provider).
#
#   hack/build-consul.sh            # builds it when missing, prints the binary's path
#
# Environment:
#   CONSUL_VERSION     default v1.20.1 (the newest the module proxy serves)
#   OSM_CONSUL_BIN_DIR where the binary goes
#                      (default ${XDG_CACHE_HOME:-$HOME/.cache}/osm-vm/consul-$CONSUL_VERSION)
#
# `go install github.com/hashicorp/consul@v` fails on Consul's replace
# directives, so the build runs in a throwaway module (see
# /work/shared/FIELD-NOTES.md, "Consul"). About 9 CPU-minutes cold; without
# debug information (-dwarf=false, -s -w), which a binary that is only run
# does not need, the compiler does about 12% less work.
set -euo pipefail

CONSUL_VERSION=${CONSUL_VERSION:-v1.20.1}
BIN_DIR=${OSM_CONSUL_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/osm-vm/consul-${CONSUL_VERSION}}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

log() { echo "build-consul: $*" >&2; }

mkdir -p "$BIN_DIR"
exec 9>"$BIN_DIR/.lock"
flock 9

if [[ -x "$BIN_DIR/consul" ]]; then
	log "consul present: $BIN_DIR/consul"
	echo "$BIN_DIR/consul"
	exit 0
fi

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
log "building consul $CONSUL_VERSION (about 9 CPU-minutes cold)"
start=$SECONDS
cd "$work"
cat >go.mod <<MOD
module consulbuild

go 1.24
MOD
go get "github.com/hashicorp/consul@${CONSUL_VERSION}" >&2
go build -trimpath -gcflags=all=-dwarf=false -o "$BIN_DIR/consul.tmp" \
	-ldflags "-s -w -X github.com/hashicorp/consul/version.GitCommit=module-proxy" \
	github.com/hashicorp/consul
mv "$BIN_DIR/consul.tmp" "$BIN_DIR/consul"
log "consul built in $((SECONDS - start))s"
"$BIN_DIR/consul" version >&2
echo "$BIN_DIR/consul"
