#!/usr/bin/env bash
# Fetches, in the background of `make test`, what its later phases download:
# the Go modules of every module and kubelet release the suite builds
# (hotplugd's, hack/image's, the oracle tests' for each release), the
# staticcheck and tool modules, and the VM assets (hack/vm-assets.sh). The
# phases that need them would fetch them themselves, one at a time, with the
# CPUs idle; here the downloads run while the first phases compile. Every
# step is one a later phase repeats, so a failure here costs nothing but the
# overlap: it is logged to bin/prefetch.log, and the phase that needs the
# download reports it. The go command locks its module cache, so a phase
# that starts a download this script has under way waits for it.
#
#   hack/prefetch.sh           in the foreground (make test starts it with &)
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
start=$(date +%s)
step() {
	local t0=$(date +%s)
	if "$@" >/dev/null 2>&1; then
		echo "prefetch: $* ($(($(date +%s) - t0)) s)"
	else
		echo "prefetch: $*: failed (the phase that needs it will fetch it again)"
	fi
}
step hack/vm-assets.sh &
step $GO mod download &
(
	cd test/kubeletcompat || exit
	step $GO mod download
	for m in modules/k8s-*.mod; do
		step $GO mod download -modfile="$m"
	done
) &
(cd hack/image && step $GO mod download) &
wait
echo "prefetch: done in $(($(date +%s) - start)) s"
