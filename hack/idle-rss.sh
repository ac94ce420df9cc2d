#!/usr/bin/env bash
# The daemon's memory over a long idle, without holding the machine:
#
#   hack/idle-rss.sh MINUTES BINARY [BINARY...]
#
# Each BINARY runs `hotplugd run --standalone --resync 1m` (BenchmarkIdle's
# flags) on the fixture of a 2-CPU machine (pkg/topology's local-2cpu, under
# --sysfs-root/--procfs-root), in a user and network namespace of its own:
# no uevent of the host reaches it, so that it is idle whatever else runs
# here, and it needs neither cpu1 nor the machine lock that BenchmarkIdle
# holds (HOTPLUGD_BENCH_IDLE_LONG=1h does the same on the real machine, and
# keeps every test that changes it waiting for the hour). Every minute, 1 s
# before each resync, it prints per binary: the RSS, its anonymous and
# file-backed parts (KiB) and the context switches so far (the wake-ups; a
# resync is one), and at the end the same as a table row. The daemons are
# the script's children and end with it.
#
# Build the binaries as the benchmarks do (CGO_ENABLED=0, -trimpath, not
# stripped): a cgo binary maps ld.so and libc, and its RSS is not
# comparable.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
[ $# -ge 2 ] || { echo "usage: $0 MINUTES BINARY [BINARY...]" >&2; exit 2; }
mins="$1"
shift
work="$(mktemp -d)"
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$work"
}
trap cleanup EXIT
mkdir -p "$work/fx"
tar -xzf "$root/pkg/topology/testdata/fixtures/local-2cpu.tar.gz" -C "$work/fx"
sys="$work/fx/sys" proc="$work/fx/proc"
[ -d "$sys" ] && [ -d "$proc" ] || { echo "idle-rss: no sys/ and proc/ in the fixture" >&2; exit 1; }

i=0
for b in "$@"; do
	unshare -U -r -n sh -c "ip link set lo up && exec '$b' run --standalone --resync 1m \
		--sysfs-root '$sys' --procfs-root '$proc' --metrics-addr 127.0.0.1:0 \
		--log-format json --log-level debug" >"$work/daemon.$i.log" 2>&1 &
	pids+=("$!")
	i=$((i + 1))
done
t0=$(date +%s)

# sample PID: "rss anon file switches"
sample() {
	local p="$1"
	echo "$(awk '/^VmRSS|^RssAnon|^RssFile/ {printf "%s ", $2}' "/proc/$p/status")$(cat /proc/"$p"/task/*/status |
		awk '/ctxt_switches/ {s += $2} END {print s}')"
}
declare -a first last
for m in $(seq 1 "$mins"); do
	d=$((t0 + 60 * m - 1 - $(date +%s)))
	[ "$d" -gt 0 ] && sleep "$d"
	line="minute $m:"
	for j in "${!pids[@]}"; do
		if ! kill -0 "${pids[$j]}" 2>/dev/null; then
			echo "idle-rss: daemon $j (${pids[$j]}) ended early; its log:" >&2
			cat "$work/daemon.$j.log" >&2
			exit 1
		fi
		s="$(sample "${pids[$j]}")"
		[ "$m" = 1 ] && first[$j]="$s"
		last[$j]="$s"
		line="$line  [$j] $s"
	done
	echo "$line"
done
echo
echo "| binary | RSS at 1 min (MiB) | RSS at $mins min (MiB) | anon / file at $mins min (MiB) | wake-ups/s from 1 to $mins min |"
echo "|---|---|---|---|---|"
j=0
for b in "$@"; do
	read -r r1 _ _ w1 <<<"${first[$j]}"
	read -r r a f w <<<"${last[$j]}"
	awk -v b="$b" -v r1="$r1" -v r="$r" -v a="$a" -v f="$f" -v w1="$w1" -v w="$w" -v m="$mins" 'BEGIN {
		wps = (m > 1) ? (w - w1) / ((m - 1) * 60) : 0
		printf "| %s | %.2f | %.2f | %.2f / %.2f | %.3f |\n", b, r1/1024, r/1024, a/1024, f/1024, wps }'
	j=$((j + 1))
done
