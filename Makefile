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

.PHONY: all build test test-deps test-servers demo proto bench fuzz fmt-check vet clean

# apt-get as root, or through sudo.
APT_GET := $(if $(filter 0,$(shell id -u)),apt-get,sudo apt-get)

all: build

build:
	@mkdir -p bin
	@for c in $(CMDS); do echo "go build bin/$$c"; $(GO) build -ldflags "$(LDFLAGS)" -o bin/$$c ./cmd/$$c || exit 1; done
	@for p in $(PLUGINS); do echo "go build bin/osm-provider-$$p"; $(GO) build -ldflags "$(LDFLAGS)" -o bin/osm-provider-$$p ./providers/$$p || exit 1; done

# The one test command: formatting, vet, the race-enabled unit and
# integration tests, then the slower suites.
test: fmt-check vet test-deps test-servers
	$(GO) test -race -count=1 -timeout 20m ./...
	@echo "== Azure provider built with its fake-ARM test mode, over real plugin subprocesses"
	$(GO) test -race -count=1 -timeout 10m -tags azurefake ./providers/azure/
	@echo "== Kubernetes provider against a real etcd + kube-apiserver (built once into $(CACHE))"
	dir=$$(./hack/build-kube-apiserver.sh | tail -n 1) && \
		OSM_KUBE_BIN_DIR=$$dir $(GO) test -race -count=1 -timeout 10m -tags k8sintegration ./providers/kubernetes/
	@echo "== Consul KV store, and osm-server replicas, against a real Consul cluster (built once into $(CACHE))"
	bin=$$(./hack/build-consul.sh | tail -n 1) && \
		OSM_CONSUL_BIN=$$bin $(GO) test -race -count=1 -timeout 10m -tags consulintegration ./internal/store/consulstore/ ./internal/store/consultest/ && \
		OSM_CONSUL_BIN=$$bin $(GO) test -race -count=1 -timeout 10m -tags consulintegration -run 'Replica' ./cmd/osm-server/

# The third-party servers the integration suites run against (etcd and
# kube-apiserver, Consul), built from the Go module proxy once into $(CACHE),
# keyed by version; on a fresh machine both build at once.
test-servers:
	@./hack/build-kube-apiserver.sh >/dev/null & kube=$$!; ./hack/build-consul.sh >/dev/null & consul=$$!; \
		wait $$kube || { echo "building kube-apiserver failed (see above)"; exit 1; }; \
		wait $$consul || { echo "building consul failed (see above)"; exit 1; }

# Debian packages the tests use (they fail, not skip, without them).
test-deps:
	@command -v systemd-analyze >/dev/null || { echo "installing systemd-analyze (Debian systemd) for the unit-file tests"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends systemd; }
	@command -v openssl >/dev/null || { echo "installing openssl for the certificate cross-checks"; \
		$(APT_GET) update -q && $(APT_GET) install -y -q --no-install-recommends openssl; }

fmt-check:
	@out=$$(gofmt -l $$(find . -name '*.go' -not -path './.tools/*')); \
	if [ -n "$$out" ]; then echo "gofmt would change these files (run gofmt -w):"; echo "$$out"; exit 1; fi

vet:
	$(GO) vet ./...

# The bookstore mesh end to end: osm-server, an osm-agent per service and
# the proxyless gRPC apps of examples/bookstore. DEMO_FLAGS="-duration 30s".
DEMO_APPS := bookbuyer bookthief bookstore bookwarehouse

demo: build
	@for a in $(DEMO_APPS); do echo "go build bin/$$a"; $(GO) build -o bin/$$a ./examples/bookstore/$$a || exit 1; done
	$(GO) run ./examples/demo $(DEMO_FLAGS)

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
	$(GO) build -o bin/osm-bench ./cmd/osm-bench
	@# O is measured when osm-server builds; L and F run regardless.
	$(GO) build -ldflags "$(LDFLAGS)" -o bin/osm-server ./cmd/osm-server && \
		$(GO) build -ldflags "$(LDFLAGS)" -o bin/osm-provider-static ./providers/static || \
		{ rm -f bin/osm-server; echo "osm-server does not build: O is left out of this run"; }
	bin/osm-bench run $(if $(QUICK),--quick) --osm-server bin/osm-server --out bench/results/latest.json $(BENCH_FLAGS)
	@# Micro-benchmarks, benchstat-comparable: benchstat old.txt bench/results/micro.txt
	$(if $(QUICK),@echo "QUICK=1: micro-benchmarks skipped",$(GO) test -run '^$$' -bench . -benchmem -count $(or $(BENCH_COUNT),5) \
		./internal/xds/ ./internal/xds/cache/ ./internal/xds/render/ > bench/results/micro.txt; s=$$?; cat bench/results/micro.txt; exit $$s)

# Every Go fuzz target for FUZZTIME each (default 30s); `make test` runs
# their committed seed corpora as ordinary tests. FUZZ=regexp picks targets.
fuzz:
	FUZZTIME=$(or $(FUZZTIME),30s) ./hack/fuzz.sh $(FUZZ)

clean:
	rm -rf bin .tools
