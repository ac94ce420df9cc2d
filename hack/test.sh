#!/usr/bin/env bash
# Runs `make test`'s phases in two lanes:
#
#   the node VM (test/e2e/node, the suite's longest package: about 14
#   minutes of QEMU under TCG, one thread), in the background from the
#   start (the Makefile first builds the kubelet of hack/kubebin.sh and the
#   node image it boots);
#
#   lint, compat, unit, components, the fleet's smoke and the host's
#   end-to-end packages
#   (test/e2e, test/e2e/vm), one after the other, at nice 10 so that the VM,
#   the long pole, keeps its core.
#
# The VM shares nothing with the others but the CPUs: its own kernel, API
# server and kubelet. The host's end-to-end tests run beside nothing but the
# VM: some assert a time (preflight's start to the Node correct within 5 s),
# which a run beside compat's oracle tests, on a saturated 2-core machine,
# missed (9.8 s); and unit's stand-in kubelet processes would be taken for
# another kubelet on this machine. The VM lane's output goes to
# bin/e2e-node.log and is printed, whole, when it ends. Every phase runs
# even when an earlier one failed; the exit status says whether all passed.
# The environment (HOTPLUGD_KUBEBIN, HOTPLUGD_VM_ASSETS, ...) is the
# Makefile's; MAKE is the make to run the phases with.
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
# hack/e2e.sh's flags, for the VM's package alone.
E2E_PACKAGES=./test/e2e/node/ GO="$GO" hack/e2e.sh >"$nodelog" 2>&1 &
node=$!
# An interrupted make test stops the VM's test too (go test passes the
# signal on to the test binary, whose cleanup stops QEMU).
trap 'kill -INT $node 2>/dev/null; wait; exit 130' INT TERM
echo "test: test/e2e/node started in the background (pid $node, output in $nodelog)"

phase lint $MAKE lint
phase compat $MAKE compat
phase unit $MAKE unit
phase components $MAKE components
# The fleet's smoke (test/fleet: 50 hotplugd processes and an API server of
# its own), alone beside the VM.
phase "fleet (smoke)" $MAKE fleet-smoke
# HOTPLUGD_E2E_SHARED_MACHINE: the VM may still run beside them, so a time
# goal is reported, not asserted, up to 4 times the goal (test/e2e's
# timeGoal); make e2e, alone on the machine, asserts it.
phase "e2e (host)" env HOTPLUGD_E2E_SHARED_MACHINE=1 $MAKE e2e E2E_PACKAGES="./test/e2e/ ./test/e2e/vm/"

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
