#!/usr/bin/env bash
# Runs the kubelet oracle tests (test/kubeletcompat) against every kubelet
# release they have a module for: go.mod's own (v1.36.3) and each
# test/kubeletcompat/modules/k8s-<version>.mod (hack/compat-modules.sh), the
# same test files built with that release's code and its build tag
# kubelet_1_<minor>. Prints, per release, how many capacity, allocatable,
# CPU-state and memory-state cases agree with the kubelet (and the first
# lines of each failure); exits 1 if any release failed.
#
# The releases share one build cache and module cache (only what differs
# between them is compiled per release) and build and run $COMPAT_JOBS
# (default: the number of CPUs, at most 4) at a time. The TestIntegration*
# tests, which change this machine's CPUs and hugepages, run afterwards, one
# release at a time, so that they never change the machine under another
# release's tests. Output per release: $COMPAT_OUT (default bin/compat)/<version>.{json,log}.
#
#   hack/compat-test.sh                    every release
#   hack/compat-test.sh v1.37.2            one
#   COMPAT_TESTFLAGS='-test.run=TestRelease' hack/compat-test.sh
set -uo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
compat="$root/test/kubeletcompat"
out="${COMPAT_OUT:-$root/bin/compat}"
GO="${GO:-go}"
jobs="${COMPAT_JOBS:-$(nproc)}"
[ "$jobs" -le 4 ] || jobs=4
read -r -a testflags <<<"${COMPAT_TESTFLAGS:-}"
pkg=github.com/hotplugd/hotplugd/test/kubeletcompat

base="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$compat/go.mod")"
versions=("$@")
if [ ${#versions[@]} -eq 0 ]; then
	versions=("$base")
	for f in "$compat"/modules/k8s-*.mod; do
		f="${f##*/k8s-}"
		versions+=("${f%.mod}")
	done
fi
mkdir -p "$out"
# The tests' temporary files: most cases write a machine's sysfs tree
# (thousands of small files) and read it back, and on a tmpfs that takes a
# third of the time it takes on this machine's disk (v1.37.2's tests: 53 s
# on the disk, 19 s on /dev/shm). /dev/shm when it is a writable tmpfs,
# else $TMPDIR; $COMPAT_TMPDIR chooses.
tmp="${COMPAT_TMPDIR:-}"
if [ -z "$tmp" ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] && [ -w /dev/shm ]; then
	tmp=/dev/shm
fi
tmp="${tmp:-${TMPDIR:-/tmp}}"

# buildflags VERSION: the module file and tag of a release.
buildflags() {
	local minor
	minor="$(echo "$1" | cut -d. -f2)"
	if [ "$1" != "$base" ]; then
		echo "-modfile=modules/k8s-$1.mod -tags=kubelet_1_$minor"
	else
		echo "-tags=kubelet_1_$minor"
	fi
}

# phase VERSION: builds the release's test binary, then runs every test but
# the integration tests. -vet=off: go test's own vet would analyze, for
# facts, every Kubernetes package the tests import, once per release
# (several minutes each, cold); make lint vets these tests for go.mod's
# release, and the other releases' builds of the same files are type-checked
# here.
phase() {
	local v="$1" t0 t1 t2
	t0=$(date +%s)
	rm -f "$out/$v.test"
	# shellcheck disable=SC2046
	if ! (cd "$compat" && $GO test -c -vet=off -o "$out/$v.test" $(buildflags "$v") .) >"$out/$v.log" 2>&1; then
		echo "{\"Action\":\"fail\",\"Package\":\"$pkg\"}" >"$out/$v.json"
		cat "$out/$v.log" >>"$out/$v.json"
		echo "compat: $v: build failed ($(($(date +%s) - t0)) s)" >&2
		return
	fi
	t1=$(date +%s)
	(cd "$compat" && TMPDIR="$tmp" $GO tool test2json -t -p "$pkg" "$out/$v.test" -test.v=test2json -test.timeout=30m \
		-test.skip='^TestIntegration' "${testflags[@]}") >"$out/$v.json" 2>>"$out/$v.log"
	t2=$(date +%s)
	echo "compat: $v: built in $((t1 - t0)) s, ran in $((t2 - t1)) s" >&2
}

start=$(date +%s)
for v in "${versions[@]}"; do
	while [ "$(jobs -rp | wc -l)" -ge "$jobs" ]; do
		wait -n
	done
	phase "$v" &
done
wait
for v in "${versions[@]}"; do
	# Not when asked for particular tests: they ran above.
	[ -x "$out/$v.test" ] && [ ${#testflags[@]} -eq 0 ] || continue
	(cd "$compat" && TMPDIR="$tmp" $GO tool test2json -t -p "$pkg" "$out/$v.test" -test.v=test2json -test.timeout=30m \
		-test.run='^TestIntegration' "${testflags[@]}") >>"$out/$v.json" 2>>"$out/$v.log"
done
echo "compat: ${#versions[@]} releases in $(($(date +%s) - start)) s" >&2

(cd "$compat" && $GO build -o "$out/casecount" ./internal/casecount) || exit 1
status=0
for v in "${versions[@]}"; do
	"$out/casecount" -label "$v" <"$out/$v.json" || status=1
done
exit $status
