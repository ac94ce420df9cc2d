#!/usr/bin/env bash
# Runs `make test`'s phases with the systemd node VM (test/e2e/node, the
# suite's longest package: about 14 minutes of QEMU under TCG, one thread)
# in the background from the moment its inputs exist (the kubelet of
# hack/kubebin.sh and the node image; the Makefile builds both first), beside
# every other phase: lint, compat, unit, components and the host's
# end-to-end packages, one after the other as before. The VM shares nothing
# with them but the CPUs: its own kernel, API server and kubelet. The other
# phases run at a lower priority (nice 10), so that the VM, the long pole,
# keeps its core and they take the other and what the VM leaves. The VM's
# output goes to bin/e2e-node.log and is printed, whole, after the other
# phases'. The environment (HOTPLUGD_KUBEBIN, HOTPLUGD_VM_ASSETS, ...) is the
# Makefile's; MAKE is the make to run the other phases with.
#
#   hack/test.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
MAKE="${MAKE:-make}"
mkdir -p bin
log=bin/e2e-node.log
start=$(date +%s)
# -vet=off: make lint vets these packages (with the e2e tag).
$GO test -tags e2e -vet=off -count=1 -v -timeout 60m ./test/e2e/node/ >"$log" 2>&1 &
node=$!
# An interrupted make test stops the VM's test too (go test passes the
# signal on to the test binary, whose cleanup stops QEMU).
trap 'kill -INT $node 2>/dev/null; wait $node; exit 130' INT TERM
echo "test: test/e2e/node started in the background (pid $node, output in $log)"
nice -n 10 $MAKE lint compat unit components e2e E2E_PACKAGES="./test/e2e/ ./test/e2e/vm/"
rest=$?
echo "test: the other phases done in $(($(date +%s) - start)) s (exit $rest); waiting for test/e2e/node ($log)"
wait $node
vm=$?
trap - INT TERM
cat "$log"
echo "test: test/e2e/node done (exit $vm); all in $(($(date +%s) - start)) s"
[ $rest -eq 0 ] && [ $vm -eq 0 ]
