#!/usr/bin/env bash
# Fetches what test/e2e/vm boots: QEMU 10 from bookworm-backports (Debian 12's
# 7.2 aborts on a CPU device_add after a device_del under TCG), its firmware,
# the library packages it needs that this machine lacks, and Debian's current
# cloud kernel. Nothing is installed: a private apt state (its own sources
# list naming this machine's Debian mirror, its own lists, cache, lock and a
# copy of dpkg's status) runs `apt-get update` and `apt-get download`, and
# every package is unpacked with `dpkg-deb -x` into
# ${HOTPLUGD_VM_CACHE:-~/.cache/hotplugd/vm}/<hash of this script>/root.
# The system's apt configuration, dpkg database and /boot are left alone.
# Prints the directory, which holds:
#   qemu      QEMU run with its unpacked libraries and firmware (a wrapper that
#             execs qemu-system-x86_64, so its PID is QEMU's)
#   vmlinuz   the kernel
#   VERSIONS  what was fetched
# Idempotent: a complete directory is printed at once (~10 ms); the first run
# takes 15-30 s (apt-get update of two suites, then the downloads).
#
#   hack/vm-assets.sh           fetch if needed, print the directory
#   hack/vm-assets.sh --check   print the directory if complete, else exit 1
#
# HOTPLUGD_VM_MIRROR overrides the Debian mirror (default: the one this
# machine's apt sources name for bookworm).
set -euo pipefail

self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
lib="$(dirname "$self")/lib/debian-apt.sh"
# shellcheck source=hack/lib/debian-apt.sh
. "$lib"
key="$(cat "$self" "$lib" | sha256sum | cut -c1-16)"
cache="${HOTPLUGD_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hotplugd/vm}"
dir="$cache/$key"

# complete DIR: the assets are there and QEMU starts (its libraries resolve).
complete() {
	[ -f "$1/VERSIONS" ] && [ -f "$1/vmlinuz" ] && [ -x "$1/qemu" ] && "$1/qemu" -version >/dev/null 2>&1
}

if complete "$dir"; then
	echo "$dir"
	exit 0
fi
if [ "${1:-}" = --check ]; then
	echo "hack/vm-assets.sh: no VM assets in $dir: run hack/vm-assets.sh" >&2
	exit 1
fi
for tool in apt-get apt-cache dpkg-deb ldd; do
	command -v "$tool" >/dev/null || { echo "hack/vm-assets.sh: $tool is needed (Debian's apt, dpkg and libc-bin)" >&2; exit 1; }
done

uri="$(debian_mirror)"
if [ -z "$uri" ]; then
	echo "hack/vm-assets.sh: no Debian mirror for bookworm in /etc/apt/sources.list{,.d/}; set HOTPLUGD_VM_MIRROR" >&2
	exit 1
fi

start=$(date +%s)
echo "hack/vm-assets.sh: fetching QEMU (bookworm-backports) and the cloud kernel from $uri into $dir" >&2
mkdir -p "$cache"
rm -rf "$dir"
tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
mkdir -p "$tmp/debs" "$tmp/root"
private_apt "$tmp/apt" "$uri" bookworm bookworm-backports
opts=("${apt_opts[@]}")

# The kernel linux-image-cloud-amd64 depends on, e.g. linux-image-6.1.0-37-cloud-amd64.
kernel="$(apt-cache "${opts[@]}" depends linux-image-cloud-amd64 | awk '$1=="Depends:" && $2 ~ /^linux-image-.*-cloud-amd64$/ { print $2; exit }')"
[ -n "$kernel" ] || { echo "hack/vm-assets.sh: linux-image-cloud-amd64 names no kernel" >&2; exit 1; }
qemu=(qemu-system-x86/bookworm-backports qemu-system-common/bookworm-backports qemu-system-data/bookworm-backports seabios/bookworm-backports)

# The libraries QEMU needs that this machine lacks (or has in too old a
# version): what installing it would add, as the resolver sees it with this
# machine's dpkg status, less the packages named above and their non-library
# dependencies (firmware, helpers QEMU does not need with -nodefaults).
mapfile -t libs < <(apt-get "${opts[@]}" -s --no-install-recommends install "${qemu[@]}" 2>/dev/null |
	awk '$1=="Inst" && $2 ~ /^lib/ && $2 !~ /^libc6/ { v=$3; if (v ~ /^\[/) v=$4; gsub(/[()]/, "", v); print $2 "=" v }')

(
	cd "$tmp/debs"
	apt-get "${opts[@]}" -qq download "${qemu[@]}" "$kernel" ${libs[@]+"${libs[@]}"}
) >&2
for deb in "$tmp/debs"/*.deb; do
	dpkg-deb -x "$deb" "$tmp/root"
done

# Check with ldd that every library resolves: the machine's own, or one just
# unpacked.
libpath="$dir/root/lib/x86_64-linux-gnu:$dir/root/usr/lib/x86_64-linux-gnu"
tmplibpath="$tmp/root/lib/x86_64-linux-gnu:$tmp/root/usr/lib/x86_64-linux-gnu"
if missing="$(LD_LIBRARY_PATH="$tmplibpath" ldd "$tmp/root/usr/bin/qemu-system-x86_64" 2>&1 | grep -E 'not found|version .* not found')"; then
	echo "hack/vm-assets.sh: QEMU's libraries do not resolve:" >&2
	echo "$missing" >&2
	exit 1
fi

vmlinuz="$(cd "$tmp/root/boot" && ls vmlinuz-*)"
ln -s "root/boot/$vmlinuz" "$tmp/vmlinuz"
cat >"$tmp/qemu" <<EOF
#!/bin/sh
# QEMU from bookworm-backports, unpacked by hack/vm-assets.sh; exec keeps the PID.
LD_LIBRARY_PATH="$libpath\${LD_LIBRARY_PATH:+:\$LD_LIBRARY_PATH}" exec "$dir/root/usr/bin/qemu-system-x86_64" -L "$dir/root/usr/share/qemu" -L "$dir/root/usr/share/seabios" "\$@"
EOF
chmod +x "$tmp/qemu"
{
	echo "mirror $uri"
	for deb in "$tmp/debs"/*.deb; do
		dpkg-deb -W --showformat='${Package} ${Version}\n' "$deb"
	done
} >"$tmp/VERSIONS"
rm -rf "$tmp/apt" "$tmp/debs"
# -T: should a concurrent run have finished first, keep its directory.
mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
trap - EXIT
if ! complete "$dir"; then
	echo "hack/vm-assets.sh: $dir/qemu -version fails" >&2
	exit 1
fi
echo "hack/vm-assets.sh: done in $(( $(date +%s) - start ))s: $(du -sh "$dir" | cut -f1)" >&2
echo "$dir"
