#!/usr/bin/env bash
# Runs `make test`'s phases in three lanes, so that the 2-core machine's
# cores are busy while a phase waits (on a VM, a kubelet, an API server):
#
#   the node VM (test/e2e/node, the suite's longest package: about 14
#   minutes of QEMU under TCG, one thread), in the background from the
#   start (the Makefile first builds the kubelet of hack/kubebin.sh and the
#   node image it boots);
#
#   lint, then compat beside the host's end-to-end packages (test/e2e,
#   test/e2e/vm: mostly waiting on a kubelet; compat's oracle tests are
#   computation in one process each), then unit and components.
#
# The VM shares nothing with the others but the CPUs: its own kernel, API
# server and kubelet. Every test that changes this machine's CPUs or
# hugepages, or runs a kubelet on it, holds machinetest's lock
# (internal/machinetest), so the host's end-to-end tests and compat's
# integration tests take turns; the host's end-to-end tests never run beside
# unit (the integration tests' stand-in kubelet processes would be taken for
# another kubelet on this machine). The phases other than the VM run at nice
# 10, so that the VM, the long pole, keeps its core. The lanes' output goes to
# bin/e2e-node.log and bin/e2e-host.log and is printed, whole, when the lane
# ends. Every phase runs even when an earlier one failed; the exit status
# says whether all passed. The environment (HOTPLUGD_KUBEBIN,
# HOTPLUGD_VM_ASSETS, ...) is the Makefile's; MAKE is the make to run the
# phases with.
#
#   hack/test.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
MAKE="${MAKE:-make}"
mkdir -p bin
start=$(date +%s)
failed=()
since() { echo "$(($(date +%s) - start)) s"; }
# phase NAME COMMAND...: runs a phase in the foreground at nice 10.
phase() {
	local name="$1"
	shift
	echo "test: $name: start at $(since)"
	if ! nice -n 10 "$@"; then
		failed+=("$name")
	fi
	echo "test: $name: done at $(since)"
}

nodelog=bin/e2e-node.log
# -vet=off: make lint vets these packages (with the e2e tag).
$GO test -tags e2e -vet=off -count=1 -v -timeout 60m ./test/e2e/node/ >"$nodelog" 2>&1 &
node=$!
hostlog=bin/e2e-host.log
host=
# An interrupted make test stops the lanes' tests too (go test passes the
# signal on to the test binary, whose cleanup stops QEMU and the kubelet).
trap 'kill -INT $node $host 2>/dev/null; wait; exit 130' INT TERM
echo "test: test/e2e/node started in the background (pid $node, output in $nodelog)"

phase lint $MAKE lint
nice -n 10 $MAKE e2e E2E_PACKAGES="./test/e2e/ ./test/e2e/vm/" >"$hostlog" 2>&1 &
host=$!
echo "test: test/e2e and test/e2e/vm started in the background at $(since) (pid $host, output in $hostlog)"
phase compat $MAKE compat
echo "test: waiting for test/e2e and test/e2e/vm ($hostlog)"
wait $host || failed+=("e2e (host)")
host=
cat "$hostlog"
echo "test: test/e2e and test/e2e/vm: done at $(since)"
phase unit $MAKE unit
phase components $MAKE components

echo "test: waiting for test/e2e/node ($nodelog)"
wait $node || failed+=("e2e (node VM)")
trap - INT TERM
cat "$nodelog"
echo "test: test/e2e/node: done at $(since)"
if [ ${#failed[@]} -gt 0 ]; then
	echo "test: FAILED: ${failed[*]} (all in $(since))"
	exit 1
fi
echo "test: ok, all in $(since)"
