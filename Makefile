# osm-vm build, test and demo. Works on a fresh Debian machine with only Go:
# anything else it needs it installs itself (into .tools/ or the cache dir).

GO       ?= go
VERSION  ?= $(shell git describe --always --dirty 2>/dev/null || echo dev)
LDFLAGS  := -X main.version=$(VERSION)
TOOLS    := $(CURDIR)/.tools/bin
CACHE    ?= $(or $(XDG_CACHE_HOME),$(HOME)/.cache)/osm-vm

# Every cmd/<name> becomes bin/<name>; every providers/<name> becomes
# bin/osm-provider-<name>, next to osm-server (its default plugin dir).
CMDS     := $(notdir $(wildcard cmd/*))
PLUGINS  := $(notdir $(wildcard providers/*))

# Generator versions are pinned; protoc is Debian 12's protobuf-compiler (3.21.12).
PROTOC_GEN_GO_VERSION      := v1.36.12
PROTOC_GEN_GO_GRPC_VERSION := v1.6.2

# test-unit, test-waiting, test-kubernetes, test-consul, test-dns, test-packages
# and test-polyglot are the parts of `make test`, each runnable alone.
.PHONY: all build packages test test-unit test-waiting test-kubernetes test-consul test-dns test-packages test-polyglot test-deps polyglot-deps test-servers test-root demo proto bench fuzz fmt-check vet clean

# apt-get as root, or through sudo.
APT_GET := $(if $(filter 0,$(shell id -u)),apt-get,sudo apt-get)

all: build

build:
	@mkdir -p bin
	@for c in $(CMDS); do echo "go build bin/$$c"; $(GO) build -ldflags "$(LDFLAGS)" -o bin/$$c ./cmd/$$c || exit 1; done
	@for p in $(PLUGINS); do echo "go build bin/osm-provider-$$p"; $(GO) build -ldflags "$(LDFLAGS)" -o bin/osm-provider-$$p ./providers/$$p || exit 1; done

# .deb and .rpm packages of osm-server, osm-agent and every provider, for
# amd64 and arm64, into dist/ (go run ./packaging -h for the options).
PKG_ARCH ?= amd64,arm64
packages:
	$(GO) run ./packaging -out dist -arch $(PKG_ARCH) $(if $(PKG_VERSION),-version $(PKG_VERSION))

# The one test command: formatting, vet, the race-enabled unit and
# integration tests, then the slower suites.
test: fmt-check
	@# What the suites need, at once: vet, the Debian and Node packages,
	@# the third-party servers and the Debian root. On a fresh machine the
	@# downloads (apt, npm, debootstrap, the module proxy) then overlap the
	@# compiles (vet, Consul, kube-apiserver) instead of following them.
	@echo "== vet, and what the suites need (built or installed once; quiet until each ends)"
	@$(MAKE) --no-print-directory -j4 --output-sync=target vet test-deps test-servers test-root
	@# Two lanes at once: the race-enabled unit tests (which keep the cores
	@# busy) beside the suites that mostly wait on Consul, BIND and a Debian
	@# root. The unit lane's output is printed when it ends; the other lane's
	@# as it goes. The suites with bounds in wall time (Kubernetes, polyglot)
	@# run afterwards, alone.
	@$(MAKE) --no-print-directory -j2 --output-sync=target test-unit test-waiting
	@$(MAKE) --no-print-directory test-kubernetes test-polyglot

test-unit:
	$(GO) test -race -count=1 -timeout 20m ./...
	@echo "== Azure provider built with its fake-ARM test mode, over real plugin subprocesses"
	$(GO) test -race -count=1 -timeout 10m -tags azurefake ./providers/azure/

test-waiting:
	@$(MAKE) --no-print-directory -j1 test-consul test-dns test-packages

test-kubernetes:
	@echo "== Kubernetes provider against a real etcd + kube-apiserver (built once into $(CACHE))"
	dir=$$(./hack/build-kube-apiserver.sh | tail -n 1) && \
		OSM_KUBE_BIN_DIR=$$dir $(GO) test -race -count=1 -timeout 10m -tags k8sintegration ./providers/kubernetes/

test-consul:
	@echo "== Consul KV store, the Consul catalog provider, osm-server replicas (one in its own network namespace: needs root) and the bench's HA section against a real Consul (built once into $(CACHE))"
	bin=$$(./hack/build-consul.sh | tail -n 1) && \
		OSM_CONSUL_BIN=$$bin $(GO) test -race -count=1 -timeout 10m -tags consulintegration ./internal/store/consulstore/ ./internal/store/consultest/ ./providers/consul/ && \
		OSM_CONSUL_BIN=$$bin $(GO) test -race -count=1 -timeout 20m -tags consulintegration -run 'Replica' ./cmd/osm-server/ && \
		OSM_CONSUL_BIN=$$bin $(GO) test -race -count=1 -timeout 5m -tags consulintegration -run 'TestHASection' ./bench/cmd/osm-bench/

test-dns:
	@echo "== DNS publishing against a real BIND 9 (named on 127.0.0.1, a TSIG key, a zone in a temp dir)"
	$(GO) test -race -count=1 -timeout 5m -tags dnsintegration ./internal/dnspublish/ && \
		$(GO) test -race -count=1 -timeout 5m -tags dnsintegration -run 'DNSPublishing' ./cmd/osm-server/

test-packages:
	@echo "== Packages: lintian, rpm, install/upgrade/remove/purge and the one-line join in a Debian 12 root (made once into $(CACHE))"
	root=$$(./hack/debian-root.sh bookworm | tail -n 1) && \
		OSM_DEBIAN_ROOT=$$root $(GO) test -count=1 -timeout 15m -tags debroot ./packaging/

test-polyglot:
	@echo "== proxyless gRPC in Python (C-core) and Node (grpc-js) against a real osm-server and agents"
	mods=$$(CACHE=$(CACHE) ./hack/node-modules.sh | tail -n 1) && \
		OSM_NODE_MODULES=$$mods $(GO) test -race -count=1 -timeout 10m -tags polyglot -run TestPolyglot ./e2e/ ./examples/demo/

# The Debian root the package tests install into (debootstrap, once into
# $(CACHE)); debootstrap comes with test-deps.
test-root: test-deps
	@./hack/debian-root.sh bookworm >/dev/null

# The third-party servers the integration suites run against (etcd and
# kube-apiserver, Consul), built from the Go module proxy once into $(CACHE),
# keyed by version; on a fresh machine both build at once.
test-servers:
	@./hack/build-kube-apiserver.sh >/dev/null & kube=$$!; ./hack/build-consul.sh >/dev/null & consul=$$!; \
		wait $$kube || { echo "building kube-apiserver failed (see above)"; exit 1; }; \
		wait $$consul || { echo "building consul failed (see above)"; exit 1; }

# Debian packages the tests use (they fail, not skip, without them), and the
# Node packages of examples/bookstore/node (npm ci from its lockfile, once,
# into $(CACHE)).
test-deps: polyglot-deps
	@command -v systemd-analyze >/dev/null || { echo "installing systemd-analyze (Debian systemd) for the unit-file tests"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends systemd; }
	@for t in lintian:lintian rpm:rpm debootstrap:debootstrap; do command -v $${t%%:*} >/dev/null || pkgs="$$pkgs $${t#*:}"; done; \
		[ -z "$$pkgs" ] || { echo "installing$$pkgs for the package tests"; $(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends $$pkgs; }
	@{ command -v named >/dev/null || test -x /usr/sbin/named; } && command -v dig >/dev/null && command -v nsupdate >/dev/null || { echo "installing BIND 9 (bind9) and dig, nsupdate (dnsutils) for the DNS publishing tests"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends bind9 dnsutils; }
	@command -v openssl >/dev/null || { echo "installing openssl for the certificate cross-checks"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends openssl; }
	@command -v promtool >/dev/null || { echo "installing promtool (Debian prometheus) for the metrics checks"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends prometheus; }
	@# Only what is missing: a Node.js from elsewhere (NodeSource's nodejs
	@# bundles npm) conflicts with Debian's npm package.
	@pkgs=; test -x /usr/bin/chromium || pkgs=chromium; command -v node >/dev/null || pkgs="$$pkgs nodejs"; \
		command -v npm >/dev/null || pkgs="$$pkgs npm"; \
		[ -z "$$pkgs" ] || { echo "installing $$pkgs for the dashboard's browser test"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends $$pkgs; }
	@# playwright-core from e2e/browser/package-lock.json, npm ci into $(CACHE) once per lockfile.
	@./hack/install-playwright.sh >/dev/null

# The proxyless apps in Python (gRPC C-core: Debian's python3-grpcio) and
# Node.js (grpc-js: nodejs, npm, and examples/bookstore/node's pinned
# packages), for the polyglot tests and the demo.
polyglot-deps:
	@/usr/bin/python3 -c 'import grpc' 2>/dev/null || { echo "installing python3-grpcio (gRPC C-core) for the Python proxyless apps"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends python3-grpcio; }
	@command -v node >/dev/null || { echo "installing nodejs for the Node proxyless apps"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends nodejs; }
	@command -v npm >/dev/null || { echo "installing npm for the Node proxyless apps"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends npm; }
	@CACHE=$(CACHE) ./hack/node-modules.sh >/dev/null

fmt-check:
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './.tools/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change these files (run gofmt -w):"; echo "$$out"; exit 1; fi

# vet with -race: the packages it compiles for the analysis are then the
# ones `go test -race` links (on a fresh machine one compile of the module
# and its dependencies fewer, about 2 CPU-minutes). It sees the same files
# but those built only without the race detector (internal/xds/norace_test.go).
vet:
	$(GO) vet -race ./...

# The bookstore mesh end to end: osm-server, an osm-agent per service and
# the proxyless gRPC apps of examples/bookstore (Go, and bookbuyers in
# Python and Node.js). DEMO_FLAGS="-duration 30s".
DEMO_APPS := bookbuyer bookthief bookstore bookwarehouse

demo: build polyglot-deps
	@for a in $(DEMO_APPS); do echo "go build bin/$$a"; $(GO) build -o bin/$$a ./examples/bookstore/$$a || exit 1; done
	$(GO) run ./examples/demo -node-modules "$$(CACHE=$(CACHE) ./hack/node-modules.sh | tail -n 1)" $(DEMO_FLAGS)

proto: $(TOOLS)/protoc-gen-go $(TOOLS)/protoc-gen-go-grpc
	@command -v protoc >/dev/null || { echo "installing protoc (Debian protobuf-compiler)"; \
		if [ "$$(id -u)" = 0 ]; then apt-get install -y protobuf-compiler; else sudo apt-get install -y protobuf-compiler; fi; }
	PATH=$(TOOLS):$$PATH protoc -I proto \
		--go_out=proto --go_opt=paths=source_relative \
		--go-grpc_out=proto --go-grpc_opt=paths=source_relative \
		$$(cd proto && find . -name '*.proto' | sed 's|^\./||')

$(TOOLS)/protoc-gen-go:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/protobuf/cmd/protoc-gen-go@$(PROTOC_GEN_GO_VERSION)

$(TOOLS)/protoc-gen-go-grpc:
	GOBIN=$(TOOLS) $(GO) install google.golang.org/grpc/cmd/protoc-gen-go-grpc@$(PROTOC_GEN_GO_GRPC_VERSION)

bench:
	@mkdir -p bin bench/results
	$(GO) build -o bin/osm-bench ./bench/cmd/osm-bench
	@# O is measured when osm-server builds; L and F run regardless.
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/osm-server ./cmd/osm-server && \
		$(GO) build -ldflags "$(LDFLAGS)" -o bin/osm-provider-static ./providers/static || \
		{ rm -f bin/osm-server; echo "osm-server does not build: O is left out of this run"; }
	@# HA (three replicas on a three-server Consul) needs the consul binary, built once into $(CACHE).
	consul=$$(./hack/build-consul.sh | tail -n 1) || { consul=; echo "consul does not build: HA is left out of this run"; }; \
		bin/osm-bench run $(if $(QUICK),--quick) --osm-server bin/osm-server --consul "$$consul" --out bench/results/latest.json $(BENCH_FLAGS)
	@# One run's joins, storm and fill move by +-15% with what the machine does in
	@# their minutes: STORM_ROUNDS (default 5) rounds of them, O and L-mux taking
	@# turns, give the medians the issue's ratios are judged by (docs/performance.md).
	$(if $(or $(QUICK),$(BENCH_FLAGS)),@echo "QUICK=1 or BENCH_FLAGS: the storms' rounds skipped",test ! -x bin/osm-server || \
		bin/osm-bench run --servers O,L-mux --metrics M5,M6 --rounds $(or $(STORM_ROUNDS),5) --osm-server bin/osm-server --out bench/results/storms.json)
	@# M2's p99 is the slowest of a run's 20 changes: M2_ROUNDS (default 3) rounds
	@# of O, L-mux and F give the medians its ratios are judged by.
	$(if $(or $(QUICK),$(BENCH_FLAGS)),@echo "QUICK=1 or BENCH_FLAGS: M2's rounds skipped",test ! -x bin/osm-server || \
		bin/osm-bench run --servers O,L-mux,F --metrics M2 --rounds $(or $(M2_ROUNDS),3) --osm-server bin/osm-server --out bench/results/m2.json)
	@# Micro-benchmarks, benchstat-comparable: benchstat old.txt bench/results/micro.txt
	$(if $(QUICK),@echo "QUICK=1: micro-benchmarks skipped",$(GO) test -run '^$$' -bench . -benchmem -count $(or $(BENCH_COUNT),5) \
		./internal/xds/ ./internal/xds/cache/ ./internal/xds/render/ > bench/results/micro.txt; s=$$?; cat bench/results/micro.txt; exit $$s)

# Every Go fuzz target for FUZZTIME each (default 30s); `make test` runs
# their committed seed corpora as ordinary tests. FUZZ=regexp picks targets.
fuzz:
	FUZZTIME=$(or $(FUZZTIME),30s) ./hack/fuzz.sh $(FUZZ)

clean:
	rm -rf bin .tools dist
