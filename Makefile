# hotplugd build, test and benchmark entry points. Every target installs what
# it needs from the Go module proxy; nothing is assumed beyond Go and make.

GO            ?= go
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS       := -s -w -X main.version=$(VERSION)
TOOLS         := $(CURDIR)/bin/tools
STATICCHECK   := $(TOOLS)/staticcheck
STATICCHECK_VERSION := v0.8.2
COMPAT        := test/kubeletcompat
# The real kube-apiserver, kubelet and etcd the integration tests run, built
# once per machine from the Go module proxy (hack/kubebin.sh, ~8 min cold) and
# cached under ~/.cache/hotplugd/kubebin.
KUBEBIN_ENV    = HOTPLUGD_KUBEBIN="$$(hack/kubebin.sh)"
# Flags for `make run`, e.g. make run ARGS="-o json".
ARGS          ?=

.PHONY: all build test unit compat e2e lint fmt bench run snapshot clean kubebin deps

all: build

## build: static binary in bin/hotplugd, version stamped
build:
	CGO_ENABLED=0 $(GO) build -trimpath -ldflags '$(LDFLAGS)' -o bin/hotplugd ./cmd/hotplugd

## run: the daemon on this machine, standalone (no cluster): logs every change; Ctrl-C stops it
run: build
	./bin/hotplugd run --standalone $(ARGS)

## snapshot: this machine's topology and the capacity a fresh kubelet would report
snapshot: build
	./bin/hotplugd snapshot $(ARGS)

# The Debian packages the tests need come first (as root on Debian; hack/deps.sh).
test: deps
## test: everything CI runs: lint, unit and privileged integration tests (against a real
## kube-apiserver and etcd), the kubelet/cAdvisor oracle tests, the end-to-end tests
test: lint unit compat e2e

## e2e: end to end, as root, one package at a time (timings): hotplug in a nested QEMU VM (assets fetched once by
## hack/vm-assets.sh) and a real kubelet with containerd on this machine
e2e: deps kubebin
	@hack/vm-assets.sh >/dev/null
	$(KUBEBIN_ENV) HOTPLUGD_VM_ASSETS="$$(hack/vm-assets.sh)" $(GO) test -tags e2e -count=1 -p 1 -v -timeout 45m ./test/e2e/...

## deps: install the Debian packages the tests need (containerd, runc, systemd, dbus, gcc), as root; nothing when present
deps:
	@hack/deps.sh

## kubebin: build (once) the kube-apiserver, kubelet and etcd the tests run; prints where
kubebin:
	@hack/kubebin.sh

unit: deps kubebin
	$(KUBEBIN_ENV) $(GO) test -race -count=1 -timeout 30m ./...

## compat: the kubelet oracle tests against every kubelet release hotplugd knows (1.34-1.37), each by its own
## code: go.mod's v1.36.3 and $(COMPAT)/modules/*.mod (hack/compat-modules.sh makes them), built with one
## shared cache, run in parallel; one line per release with the cases that agree (hack/compat-test.sh)
compat:
	GO=$(GO) hack/compat-test.sh

## lint: gofmt, go vet and staticcheck over both modules (go vet also over every kubelet release's oracle build)
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags e2e ./...
	$(STATICCHECK) -tags e2e ./...
	cd $(COMPAT) && $(GO) vet ./... && $(STATICCHECK) ./...
	@# go vet for every other kubelet release's build of the oracle tests (staticcheck's
	@# loader does not take -modfile: it checks the default release only)
	cd $(COMPAT) && for m in modules/k8s-*.mod; do v=$${m#modules/k8s-}; v=$${v%.mod}; \
	  $(GO) vet -modfile=$$m -tags kubelet_1_$$(echo $$v | cut -d. -f2) ./... || exit 1; done

$(STATICCHECK):
	GOBIN=$(TOOLS) $(GO) install honnef.co/go/tools/cmd/staticcheck@$(STATICCHECK_VERSION)

fmt:
	gofmt -w $$(git ls-files '*.go')

## bench: snapshot timings and the ratio against cAdvisor's machine.Info; state-file verify+plan+write; the daemon's
## detection latency, reconciles per burst and idle cost on this machine; API requests per change and at idle
## (as root, ~4 min)
bench:
	$(GO) test -run '^$$' -bench . -benchmem ./pkg/topology/ ./pkg/cpumgr/ ./pkg/memmgr/ ./pkg/statefile/
	cd $(COMPAT) && $(GO) test -run '^$$' -bench . -benchmem ./...
	$(KUBEBIN_ENV) $(GO) test -run '^$$' -bench . -benchtime 1x -timeout 20m ./test/integration/

clean:
	rm -rf bin
