#!/usr/bin/env bash
# Runs the end-to-end packages (make e2e). By default one package at a time
# (go test -p 1), so that each package's timings are taken on an otherwise
# idle machine: the numbers of docs/benchmarks.md come from this. With
# E2E_PARALLEL=1 (make test sets it), the systemd node VM (test/e2e/node:
# QEMU, its own API server) runs beside the host's packages (test/e2e, a
# real kubelet on this machine, and test/e2e/vm), whose time is mostly spent
# waiting on a kubelet: the suite's wall time drops by the shorter of the
# two, and their timings are noisier. The node VM's output is printed after
# the host's, whole, not interleaved. The environment (HOTPLUGD_KUBEBIN,
# HOTPLUGD_VM_ASSETS, ...) is the Makefile's.
#
#   hack/e2e.sh [go test flags...]
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
# -vet=off: make lint vets these packages (with the e2e tag).
flags=(-tags e2e -vet=off -count=1 -v -timeout 60m "$@")
if [ "${E2E_PARALLEL:-0}" != 1 ]; then
	exec $GO test -p 1 "${flags[@]}" ./test/e2e/...
fi
mkdir -p bin
log=bin/e2e-node.log
start=$(date +%s)
$GO test "${flags[@]}" ./test/e2e/node/ >"$log" 2>&1 &
node=$!
# The node VM's test binary first: both compile the same packages.
$GO test -p 1 "${flags[@]}" ./test/e2e/ ./test/e2e/vm/
host=$?
echo "e2e: host packages done in $(($(date +%s) - start)) s; waiting for test/e2e/node ($log)"
wait $node
vm=$?
cat "$log"
echo "e2e: test/e2e/node done; all in $(($(date +%s) - start)) s"
[ $host -eq 0 ] && [ $vm -eq 0 ]
