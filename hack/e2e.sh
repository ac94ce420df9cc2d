#!/usr/bin/env bash
# Runs the end-to-end packages (make e2e), one package at a time (go test
# -p 1), so that each package's timings are taken on an otherwise idle
# machine: the numbers of docs/benchmarks.md come from this. E2E_PACKAGES
# names the packages (default: all of test/e2e; make test runs the node VM
# beside the other phases, hack/test.sh, and the others here). The
# environment (HOTPLUGD_KUBEBIN, HOTPLUGD_VM_ASSETS, ...) is the Makefile's.
#
#   hack/e2e.sh [go test flags...]
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
# -vet=off: make lint vets these packages (with the e2e tag).
# shellcheck disable=SC2086 # E2E_PACKAGES is a list
exec $GO test -p 1 -tags e2e -vet=off -count=1 -v -timeout 60m "$@" ${E2E_PACKAGES:-./test/e2e/...}
