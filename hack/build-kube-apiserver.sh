#!/usr/bin/env bash
# build-kube-apiserver.sh builds etcd and kube-apiserver from the Go module
# proxy into a cache directory outside the repository, once per version, for
# the Kubernetes provider's integration test (build tag k8sintegration).
#
#   hack/build-kube-apiserver.sh          # builds what is missing, prints the directory
#   OSM_KUBE_BIN_DIR=$(hack/build-kube-apiserver.sh | tail -1) \
#     go test -tags k8sintegration ./providers/kubernetes/...
#
# Environment:
#   KUBE_VERSION      kube-apiserver version (default v1.34.4)
#   ETCD_VERSION      etcd version (default v3.6.4)
#   OSM_KUBE_BIN_DIR  where the binaries go
#                     (default ${XDG_CACHE_HOME:-$HOME/.cache}/osm-vm/kube-$KUBE_VERSION)
#
# Recipe (see /work/shared/FIELD-NOTES.md, "Kubernetes"): each binary is
# built in a throwaway module; kube-apiserver needs `godebug default=go1.24`
# and a replace of every staging module (k8s.io/api, k8s.io/apiserver, ...)
# listed in k8s.io/kubernetes's own go.mod by its published v0.X.Y version.
# A cold build takes ~7 minutes and ~1.8 GiB of memory on 2 cores. The
# binaries carry no debug information (-dwarf=false, -s -w): they are only
# run, and the compiler does 12% less work without it (etcd: 145 against
# 127 CPU-seconds).
set -euo pipefail

KUBE_VERSION=${KUBE_VERSION:-v1.34.4}
ETCD_VERSION=${ETCD_VERSION:-v3.6.4}
BIN_DIR=${OSM_KUBE_BIN_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/osm-vm/kube-${KUBE_VERSION}}
export GOTOOLCHAIN=local GOFLAGS=-mod=mod

log() { echo "build-kube-apiserver: $*" >&2; }

mkdir -p "$BIN_DIR"
# One build at a time per cache directory (several engineers, one machine).
exec 9>"$BIN_DIR/.lock"
flock 9

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

build_etcd() {
	if [[ -x "$BIN_DIR/etcd" ]]; then
		log "etcd present: $BIN_DIR/etcd"
		return
	fi
	log "building etcd $ETCD_VERSION (about a minute)"
	local start=$SECONDS
	mkdir -p "$work/etcd" && cd "$work/etcd"
	cat >go.mod <<MOD
module etcdbuild

go 1.24
MOD
	go get "go.etcd.io/etcd/server/v3@${ETCD_VERSION}" >&2
	go build -trimpath -gcflags=all=-dwarf=false -ldflags "-s -w" -o "$BIN_DIR/etcd.tmp" go.etcd.io/etcd/server/v3
	mv "$BIN_DIR/etcd.tmp" "$BIN_DIR/etcd"
	log "etcd built in $((SECONDS - start))s"
}

build_apiserver() {
	if [[ -x "$BIN_DIR/kube-apiserver" ]]; then
		log "kube-apiserver present: $BIN_DIR/kube-apiserver"
		return
	fi
	log "building kube-apiserver $KUBE_VERSION (about 7 minutes cold on 2 cores)"
	local start=$SECONDS
	local minor=${KUBE_VERSION#v1.}          # 34.4
	local staging_version="v0.${minor}"      # v0.34.4
	minor=${minor%%.*}                       # 34
	mkdir -p "$work/apiserver" && cd "$work/apiserver"
	cat >go.mod <<MOD
module kubeapiserverbuild

go 1.24.0

godebug default=go1.24
MOD
	# The staging modules are replace directives to ./staging/src in
	# k8s.io/kubernetes's go.mod; point each at its published version.
	local gomod
	gomod=$(go mod download -json "k8s.io/kubernetes@${KUBE_VERSION}" | sed -n 's/^[[:space:]]*"GoMod": "\(.*\)",$/\1/p')
	if [[ -z "$gomod" || ! -f "$gomod" ]]; then
		log "could not find the go.mod of k8s.io/kubernetes@${KUBE_VERSION} in the module cache"
		exit 1
	fi
	local staging
	staging=$(sed -n 's#^[[:space:]]*\(k8s\.io/[^[:space:]]*\) => \./staging/src/.*#\1#p' "$gomod")
	if [[ -z "$staging" ]]; then
		log "no staging replace directives found in $gomod; has the layout of k8s.io/kubernetes changed?"
		exit 1
	fi
	local m
	for m in $staging; do
		go mod edit -replace "${m}=${m}@${staging_version}"
	done
	go get "k8s.io/kubernetes/cmd/kube-apiserver@${KUBE_VERSION}" >&2
	local v=k8s.io/component-base/version
	go build -trimpath -gcflags=all=-dwarf=false -o "$BIN_DIR/kube-apiserver.tmp" \
		-ldflags "-s -w -X ${v}.gitVersion=${KUBE_VERSION} -X ${v}.gitMajor=1 -X ${v}.gitMinor=${minor} -X ${v}.gitTreeState=clean -X ${v}.buildDate=1970-01-01T00:00:00Z" \
		k8s.io/kubernetes/cmd/kube-apiserver
	mv "$BIN_DIR/kube-apiserver.tmp" "$BIN_DIR/kube-apiserver"
	log "kube-apiserver built in $((SECONDS - start))s"
}

build_etcd
build_apiserver
"$BIN_DIR/kube-apiserver" --version >&2
echo "$BIN_DIR"
