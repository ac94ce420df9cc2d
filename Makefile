# hotplugd build, test and benchmark entry points. Every target installs what
# it needs from the Go module proxy; nothing is assumed beyond Go and make.

GO            ?= go
VERSION       ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS        = -s -w -X main.version=$(VERSION)
TOOLS         := $(CURDIR)/bin/tools
STATICCHECK   := $(TOOLS)/staticcheck
STATICCHECK_VERSION := v0.8.2
COMPAT        := test/kubeletcompat
# One flag set for every build of the suite: the tests, go vet, staticcheck's
# export data, the programs hack/kubebin.sh builds and the binaries the tests
# build. A package is then compiled once per release and build cache, not once
# per tool (docs/development.md). The race detector is the exception: it needs
# cgo (go1.26 refuses -race with CGO_ENABLED=0), and its builds are a set of
# their own anyway, so they are kept to RACE_PKGS.
export CGO_ENABLED := 0
export GOFLAGS := $(strip -trimpath $(filter-out -trimpath,$(shell $(GO) env GOFLAGS 2>/dev/null)))
# The real kube-apiserver, kubelet and etcd the integration and end-to-end
# tests run, built once per machine from the kubelet oracle tests' module
# (hack/kubebin.sh, sharing their compiled packages) and cached under
# ~/.cache/hotplugd/kubebin: the current release's (v1.37.2), and the kubelet
# of the oldest release hotplugd supports (KUBELET_OLDEST), which the
# incidents also run on.
KUBELET_OLDEST ?= v1.34.4
KUBEBIN_ENV    = HOTPLUGD_KUBEBIN="$$(hack/kubebin.sh)" HOTPLUGD_KUBELET_OLDEST="$$(hack/kubebin.sh $(KUBELET_OLDEST) kubelet)/kubelet"
# Flags for `make run`, e.g. make run ARGS="-o json".
ARGS          ?=

.PHONY: all build test prefetch check race-pkgs unit compat e2e e2e-node e2e-node-faults node-image lint fmt bench fleet fleet-smoke run snapshot clean kubebin deps

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

# The Debian packages the tests need come first (as root on Debian; hack/deps.sh), then the downloads of the later
# phases start in the background (hack/prefetch.sh, logged to bin/prefetch.log).
test: deps prefetch
## test: everything CI runs: lint, the kubelet/cAdvisor oracle tests of every release, unit and privileged integration
## tests (against a real kube-apiserver and etcd), the kustomize components, the end-to-end tests. The real kubelet and
## API server (hack/kubebin.sh) and the node image come first: the node VM (test/e2e/node, the longest package) then
## runs in the background beside every other phase (hack/test.sh); the oracle tests reuse the kubelet packages
## kubebin compiled
test: kubebin node-image
	$(E2E_ENV) GO="$(GO)" MAKE="$(MAKE)" hack/test.sh

## prefetch: start, in the background, the downloads of make test's later phases (Go modules of every module and
## release, the VM assets); make test does it first
prefetch:
	@mkdir -p bin && (hack/prefetch.sh >bin/prefetch.log 2>&1 &)

## check: the inner loop, under a minute warm: gofmt, go vet and the unit tests of the packages a change touches
## (uncommitted and untracked files, or everything since BASE: make check BASE=origin/main); hack/check.sh
BASE ?=
check:
	@GO=$(GO) hack/check.sh $(BASE)

## e2e: end to end, as root, one package at a time (timings): hotplug in a nested QEMU VM (assets fetched once by
## hack/vm-assets.sh), a real kubelet with containerd on this machine, and a systemd node VM (test/e2e/node, its
## disk image built once by hack/node-image.sh)
## E2E_PACKAGES narrows the packages (make test runs test/e2e/node beside the other phases, hack/test.sh)
E2E_PACKAGES ?= ./test/e2e/...
e2e: deps kubebin node-image
	$(E2E_ENV) E2E_PACKAGES="$(E2E_PACKAGES)" GO=$(GO) hack/e2e.sh

## e2e-node: as root, only the systemd node VM: the five incidents on a Debian node with systemd, containerd and
## a kubeadm-laid-out kubelet, hotplugd installed as this README says; the restart withheld for staged changes and a
## masked unit, the kubelet's start without hotplugd's binary, a plain kubelet unit, SIGKILL at every moment of a
## remedy (one trial per moment; make e2e-node-faults runs more), a Service's ready pod through a remedy (its
## EndpointSlice watched)
e2e-node: deps kubebin node-image
	$(E2E_ENV) $(GO) test -tags e2e -vet=off -count=1 -v -timeout 40m ./test/e2e/node/

## e2e-node-faults: as root, scenario 10 alone (TestNodeFaults: one boot of the node VM with 5 CPUs) at
## $(FAULT_TRIALS) trials per moment (make e2e-node runs one): hotplugd's unit and the DaemonSet's pod killed with
## SIGKILL before the kubelet restart is asked, while systemd's restart job runs, while preflight repairs in the
## kubelet's start, and during the verification; each trial checks the kubelet active, its state files valid and at
## most one restart
FAULT_TRIALS ?= 20
e2e-node-faults: deps kubebin node-image
	$(E2E_ENV) HOTPLUGD_NODE_FAULT_TRIALS=$(FAULT_TRIALS) $(GO) test -tags e2e -vet=off -count=1 -v -timeout 4h -run '^TestNodeFaults$$' ./test/e2e/node/

## node-image: fetch QEMU and the kernel (hack/vm-assets.sh) and build the node VM's disk image
## (hack/node-image.sh), each once per machine and cached under ~/.cache/hotplugd/vm
node-image:
	@hack/vm-assets.sh >/dev/null
	@$(KUBEBIN_ENV) hack/node-image.sh >/dev/null

E2E_ENV = $(KUBEBIN_ENV) HOTPLUGD_VM_ASSETS="$$(hack/vm-assets.sh)" HOTPLUGD_NODE_IMAGE="$$($(KUBEBIN_ENV) hack/node-image.sh --check)"

## deps: install the Debian packages the tests need (containerd, runc, systemd, dbus, gcc), as root; nothing when present
deps:
	@hack/deps.sh

## kubebin: build (once) the kube-apiserver, kubelet and etcd the tests run, and the oldest release's kubelet; prints where
kubebin:
	@hack/kubebin.sh
	@hack/kubebin.sh $(KUBELET_OLDEST) kubelet

# RACE_PKGS are the packages whose code starts goroutines (the control loop, the sources, the executors): their tests
# run with the race detector, the others' without it, as they only parse and compute (cmd/hotplugd's TestRacePackages
# checks the list against the code).
RACE_PKGS = ./pkg/control ./pkg/cpuonline ./pkg/daemon ./pkg/debounce ./pkg/hugepagewatch ./pkg/journal \
  ./pkg/kubeletctl ./pkg/kubeletwatch ./pkg/nodepatch ./pkg/pause ./pkg/remedy ./pkg/sdnotify ./pkg/topology ./pkg/uevent ./pkg/watchone ./cmd/hotplugd
UNIT_PKGS = $(filter-out $(patsubst ./%,$(shell $(GO) list -m)/%,$(RACE_PKGS)) $(shell $(GO) list -m)/test/fleet,$(shell $(GO) list ./...))

## race-pkgs: print RACE_PKGS (hack/check.sh reads them here)
race-pkgs:
	@echo $(RACE_PKGS)

## unit: the tests of RACE_PKGS with -race, every other package's without (the integration tests among them), and
## hack/image's. -vet=off here and in every go test of make test: make lint has vetted these packages with every
## analyzer, and go test's own vet would analyze every dependency again, for facts, once per flag set
unit: deps kubebin
	$(KUBEBIN_ENV) CGO_ENABLED=1 $(GO) test -vet=off -race -count=1 -timeout 30m $(RACE_PKGS)
	$(KUBEBIN_ENV) $(GO) test -vet=off -count=1 -timeout 30m $(UNIT_PKGS)
	cd hack/image && $(GO) test -vet=off -count=1 ./...

## compat: the kubelet oracle tests against every kubelet release hotplugd knows (1.34-1.37), each by its own
## code: go.mod's v1.36.3 and $(COMPAT)/modules/*.mod (hack/compat-modules.sh makes them), built with one
## shared cache, run in parallel; one line per release with the cases that agree (hack/compat-test.sh). hack/kubebin.sh
## links the tests' kubelets and API server from the packages it compiled
compat:
	GO=$(GO) hack/compat-test.sh

.PHONY: components monitoring

## components: deploy/kubernetes and its opt-in components built with the real kustomize (each changes only what it
## says, by name; the report-only base's privileges; another namespace): monitoring, whose PrometheusRule also goes
## through promtool check rules and test rules, and restart-kubelet; the Helm chart deploy/helm/hotplugd (helm lint
## --strict, its values schema, and helm template equal to the kustomize build for the same settings) (test/components;
## kustomize, promtool and helm from hack/tool.sh, promtool and helm about 4-5 min each cold)
components:
	@hack/tool.sh kustomize >/dev/null && hack/tool.sh promtool >/dev/null && hack/tool.sh helm >/dev/null
	HOTPLUGD_KUSTOMIZE="$$(hack/tool.sh kustomize)" HOTPLUGD_PROMTOOL="$$(hack/tool.sh promtool)" HOTPLUGD_HELM="$$(hack/tool.sh helm)" $(GO) test -vet=off -count=1 -v ./test/components/

monitoring: components

## lint: gofmt, go vet and staticcheck over hotplugd's packages and hack/image; go vet over the oracle tests of go.mod's
## kubelet release (the other releases' builds of the same files are type-checked by make compat; hack/check.sh vets
## the release-tagged files a change touches for their own release); the releases' module files current (hack/compat-modules.sh -check)
lint: $(STATICCHECK)
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go' -not -path './bin/*')); \
	  if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
	$(GO) vet -tags e2e ./...
	$(STATICCHECK) -tags e2e ./...
	cd hack/image && $(GO) vet ./... && $(STATICCHECK) ./...
	cd $(COMPAT) && $(GO) vet ./...
	@# A dependency added to go.mod changes what each release's module file
	@# selects: a stale one fails compat and kubebin only later, in a fresh clone.
	hack/compat-modules.sh -check

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

## fleet: the fleet simulation at scale, a benchmark (make test runs its 50-node smoke): one real kube-apiserver and
## etcd, FLEET_NODES hotplugd processes each with its own fixture machine and Node (500: each takes about 8 threads,
## and this kind of machine allows 4915 tasks in all; 1000 needs a machine that allows 9000), 10 minutes idle, every
## node's hugepages changed at once, the remedy under a restart budget of 5 with 25 holders killed; the table (API
## server requests per node per hour, watches, memory, write latency p99, time to current) in bin/fleet.md (test/fleet)
FLEET_NODES ?= 500
fleet: deps kubebin
	@mkdir -p bin
	$(KUBEBIN_ENV) HOTPLUGD_FLEET_NODES=$(FLEET_NODES) HOTPLUGD_FLEET_BUDGET=5 HOTPLUGD_FLEET_KILLS=25 HOTPLUGD_FLEET_IDLE=10m \
		HOTPLUGD_FLEET_REPORT=$(CURDIR)/bin/fleet.md $(GO) test -vet=off -count=1 -v -timeout 120m -run '^TestFleet$$' ./test/fleet/

## fleet-smoke: make test's run of the fleet: 50 nodes, a budget of 2, 2 holders killed, 30 s idle; a phase of its
## own after unit, so that its 50 processes and API server do not share the machine with the integration tests'
fleet-smoke: deps kubebin
	$(KUBEBIN_ENV) $(GO) test -vet=off -count=1 -v -timeout 20m -run '^TestFleet$$' ./test/fleet/

clean:
	rm -rf bin

# The container image (hack/image, docs/image.md): for linux/amd64 and
# linux/arm64, one layer holding only the static binary at IMAGE_PATH; the
# same commit gives the same index digest. The Dockerfile's final stage must
# agree with IMAGE_PATH, IMAGE_ENTRYPOINT and LDFLAGS (hack/image's
# TestDockerfileMatchesMakefile reads both files).
IMAGE            ?= ghcr.io/hotplugd/hotplugd
IMAGE_PATH       := /hotplugd
IMAGE_ENTRYPOINT := /hotplugd
IMAGE_SOURCE     ?= https://github.com/hotplugd/hotplugd
IMAGE_DIR        := bin/image
IMAGE_ARCHIVE    := $(IMAGE_DIR)/hotplugd.oci.tar
IMAGE_TOOL       := $(TOOLS)/hotplugd-image
# What goes into the image: go.mod, go.sum, the tool, and the directories of
# the module's packages the binary is built from (go list -deps), without
# tests and test data. The image's version, revision and timestamps are those
# of the last commit that changed one of these (IMAGE_COMMIT), not of HEAD: a
# commit that changes only tests, manifests (the digest pin itself) or docs
# builds the same digest, so deploy/kubernetes can pin the digest of the
# image its own commit builds (checked by test/e2e's TestImage).
IMAGE_INPUTS      = go.mod go.sum hack/image \
  $(shell GOOS=linux $(GO) list -deps -f '{{if .Module}}{{if .Module.Main}}{{.Dir}}{{end}}{{end}}' ./cmd/hotplugd | sed 's|^$(CURDIR)/||') \
  ':(exclude,glob)**/*_test.go' ':(exclude,glob)**/testdata/**'
IMAGE_COMMIT      = $(shell git log -1 --format=%H -- $(IMAGE_INPUTS) 2>/dev/null)
# The image's version: `git describe` of IMAGE_COMMIT, -dirty when an input
# has uncommitted changes.
IMAGE_VERSION     = $(or $(shell git describe --tags --always --abbrev=12 $(IMAGE_COMMIT) 2>/dev/null),dev)$(if $(shell git status --porcelain -- $(IMAGE_INPUTS) 2>/dev/null),-dirty)
# Every timestamp in the image: SOURCE_DATE_EPOCH if set, else IMAGE_COMMIT's.
IMAGE_EPOCH       = $(or $(SOURCE_DATE_EPOCH),$(shell git log -1 --format=%ct $(IMAGE_COMMIT) 2>/dev/null),0)
IMAGE_REVISION    = $(IMAGE_COMMIT)
# The Go release of go.mod builds the image's binaries (downloaded from the
# module proxy when the local go is another): the same source gives the same
# bytes on every machine.
IMAGE_GOTOOLCHAIN = go$(shell awk '$$1 == "go" {print $$2; exit}' go.mod)
# The images: entry that push and pin-image rewrite (newName + digest).
KUSTOMIZATION    := deploy/kubernetes/kustomization.yaml
KUSTOMIZE_IMAGE  := ghcr.io/hotplugd/hotplugd

.PHONY: image push pin-image image-inputs

## image-inputs: the git pathspecs of what goes into the image, one per line
image-inputs:
	@printf '%s\n' $(IMAGE_INPUTS)

# The image, its tag and its binaries carry IMAGE_VERSION.
image push pin-image: VERSION = $(IMAGE_VERSION)

## image: bin/image/hotplugd.oci.tar (an OCI archive: `ctr -n k8s.io images import` takes it) and bin/image/oci/ (OCI
## layout) of $(IMAGE):$(VERSION) for linux/amd64 and linux/arm64, without Docker; the last line is the index digest.
## -buildvcs=false: the binary does not record the checkout's vcs state (VERSION already says -dirty)
image: $(IMAGE_TOOL)
	@mkdir -p $(IMAGE_DIR)
	GOTOOLCHAIN=$(IMAGE_GOTOOLCHAIN) CGO_ENABLED=0 GOOS=linux GOARCH=amd64 $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(IMAGE_DIR)/hotplugd-linux-amd64 ./cmd/hotplugd
	GOTOOLCHAIN=$(IMAGE_GOTOOLCHAIN) CGO_ENABLED=0 GOOS=linux GOARCH=arm64 $(GO) build -trimpath -buildvcs=false -ldflags '$(LDFLAGS)' -o $(IMAGE_DIR)/hotplugd-linux-arm64 ./cmd/hotplugd
	@$(IMAGE_TOOL) build \
	  --platform linux/amd64=$(IMAGE_DIR)/hotplugd-linux-amd64 \
	  --platform linux/arm64=$(IMAGE_DIR)/hotplugd-linux-arm64 \
	  --path $(IMAGE_PATH) --entrypoint $(IMAGE_ENTRYPOINT) --epoch $(IMAGE_EPOCH) --name $(IMAGE):$(VERSION) \
	  --annotation org.opencontainers.image.version=$(VERSION) \
	  $(if $(IMAGE_REVISION),--annotation org.opencontainers.image.revision=$(IMAGE_REVISION)) \
	  --annotation org.opencontainers.image.source=$(IMAGE_SOURCE) \
	  --out $(IMAGE_ARCHIVE) --layout $(IMAGE_DIR)/oci

## push: make image, push it to $(IMAGE):$(VERSION) with your docker/podman credentials and pin $(KUSTOMIZATION)
## to $(IMAGE)@digest, e.g. make push IMAGE=registry.example.com/ops/hotplugd; the last line is that reference
push: image
	@ref=$$($(IMAGE_TOOL) push --archive $(IMAGE_ARCHIVE) $(IMAGE):$(VERSION)) && \
	  $(IMAGE_TOOL) pin --kustomization $(KUSTOMIZATION) --name $(KUSTOMIZE_IMAGE) --new-name $(IMAGE) --digest $${ref##*@} && \
	  echo "$$ref"

## pin-image: only the pin: $(KUSTOMIZATION) to $(IMAGE)@<index digest of $(IMAGE_ARCHIVE)>, for an image pushed
## with skopeo or crane
pin-image: $(IMAGE_TOOL)
	@test -f $(IMAGE_ARCHIVE) || { echo "pin-image: no $(IMAGE_ARCHIVE): run make image first" >&2; exit 1; }
	@digest=$$($(IMAGE_TOOL) digest --archive $(IMAGE_ARCHIVE)) && \
	  $(IMAGE_TOOL) pin --kustomization $(KUSTOMIZATION) --name $(KUSTOMIZE_IMAGE) --new-name $(IMAGE) --digest $$digest

# A release (hack/release.sh, docs/release.md). VERSION reaches the script
# only when given (command line or environment): otherwise the script takes
# the vX.Y.Z tag of HEAD, not the Makefile's git describe.
DIST             ?= dist
RELEASE_UNTAGGED ?=

.PHONY: release

## release: $(DIST)/ for VERSION=vX.Y.Z (default: HEAD's vX.Y.Z tag): static binaries for linux/amd64 and arm64 with
## an SPDX SBOM each, make image's OCI archive (same digest), deploy/kubernetes rendered report-only and with each
## component and the packaged Helm chart, both pinned to that digest, CHANGELOG.md's section, SHA256SUMS; the same
## commit gives the same bytes. Refuses a VERSION that is not HEAD's tag, a dirty tree or a version CHANGELOG.md
## lacks, unless RELEASE_UNTAGGED=1 (a trial release); hack/release.sh, docs/release.md
release: $(IMAGE_TOOL)
	@VERSION="$(if $(filter command line environment,$(origin VERSION)),$(VERSION))" DIST="$(DIST)" \
	  RELEASE_UNTAGGED="$(RELEASE_UNTAGGED)" IMAGE="$(IMAGE)" IMAGE_SOURCE="$(IMAGE_SOURCE)" \
	  KUSTOMIZE_IMAGE="$(KUSTOMIZE_IMAGE)" IMAGE_TOOL="$(IMAGE_TOOL)" GO="$(GO)" MAKE="$(MAKE)" hack/release.sh

# hack/image is its own module: go-containerregistry stays out of hotplugd's go.mod.
$(IMAGE_TOOL): hack/image/go.mod hack/image/go.sum $(filter-out %_test.go,$(wildcard hack/image/*.go))
	cd hack/image && $(GO) build -trimpath -o $(IMAGE_TOOL) .
