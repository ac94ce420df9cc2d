#!/usr/bin/env bash
# Builds the disk image of the node VM that test/e2e/node boots: Debian 12
# (bookworm) with systemd, containerd, runc, Debian's cloud kernel and the
# kubelet laid out as the Kubernetes packages and kubeadm lay it out, plus
# the test's agent (test/e2e/node/agent). The guest's configuration is the
# plain files under test/e2e/node/image/, copied into the tree as they are
# (their paths are the guest's).
#
# Nothing is installed on this machine. The root file system is built by
# Debian's mmdebstrap, which is fetched like hack/vm-assets.sh fetches QEMU:
# a private apt state (its own sources list naming this machine's Debian
# mirror, its own lists, cache and a copy of dpkg's status) runs
# `apt-get update` and `apt-get download`, and the package is unpacked with
# `dpkg-deb -x` into the build directory and run from there. mmdebstrap runs
# in root mode inside `unshare --mount --pid --fork`: whatever it mounts
# (the chroot's /proc, /sys, /dev) is gone with its mount namespace, and no
# process it started can outlive it. The file system image is then made by
# this machine's mke2fs from the tree (`mkfs.ext4 -d`), without a loop
# mount. The system's apt configuration, dpkg database and /boot are left
# alone.
#
# Prints the directory
#   ${HOTPLUGD_VM_CACHE:-~/.cache/hotplugd/vm}/node-<key>
# key: sha256 of this script, the files under test/e2e/node/image/, the
# agent's sources and the kubelet binary. It holds:
#   disk.img    raw ext4 file system (not partitioned, label root, 4 GiB
#               apparent size, sparse): boot it with root=/dev/vda rw
#   vmlinuz     the kernel installed in the image (linux-image-cloud-amd64)
#   initrd.img  its initramfs (initramfs-tools; virtio_pci and virtio_blk)
#   VERSIONS    kernel, kubelet, containerd, runc, systemd, mmdebstrap,
#               mirror, package count, build seconds
#   PACKAGES    the image's packages: name, version, installed KiB
# Building an image removes the cache's images of other keys.
# The guest: hostname hotplugd-node; systemd-networkd gives the virtio NIC
# 10.0.2.15/24, gateway 10.0.2.2 (QEMU user-mode network), no DNS;
# containerd enabled (systemd cgroups, sandbox image
# hotplugd.test/pause:e2e, loopback-only CNI); /usr/bin/kubelet with
# kubelet.service and kubeadm's 10-kubeadm.conf, installed, NOT enabled;
# e2e-agent.service enabled, listening on :7070; journal persistent; empty
# /etc/machine-id; cgroup v2; AppArmor on (apparmor_parser for
# containerd, apparmor.service off). Debian's udev has no rule onlining
# hot-added CPUs or memory: memory is onlined by the kernel as
# memhp_default_state= says, a hot-added CPU stays offline until 1 is
# written to its online file. hotplugd is not in the image: the test
# installs it.
#
# Idempotent: a complete directory is printed at once (no network; about
# 0.4 s, most of it hashing the kubelet). The first run takes 65-75 s on 2
# cores (measured: apt-get update 5 s, mmdebstrap 55-60 s, of which dpkg
# and the two initramfs builds most, then the agent build and mke2fs), and
# leaves about 530 MB on disk (disk.img 510 MB allocated of its 4 GiB).
# Measured boot under TCG (-smp 2 -m 2G, this image's kernel and initramfs,
# root=/dev/vda rw): the agent answers 21 s after QEMU starts,
# `systemctl is-system-running --wait` says running at 21-22 s (kernel and
# initramfs 8.5 s, userspace 11.5 s; containerd takes 4.8 s of that).
# QEMU's virtio-net-pci needs romfile= (hack/vm-assets.sh has no iPXE ROM).
#
#   hack/node-image.sh           build if needed, print the directory
#   hack/node-image.sh --check   print the directory if complete, else exit 1
#
# The kubelet is $HOTPLUGD_KUBEBIN/kubelet when HOTPLUGD_KUBEBIN is set, else
# the one hack/kubebin.sh prints (which builds it when missing; --check never
# builds). HOTPLUGD_VM_MIRROR overrides the Debian mirror (default: the one
# this machine's apt sources name for bookworm). Must run as root
# (mmdebstrap's root mode; chroot).
set -euo pipefail

self="$(cd "$(dirname "$0")" && pwd)/$(basename "$0")"
root="$(cd "$(dirname "$0")/.." && pwd)"
lib="$root/hack/lib/debian-apt.sh"
# shellcheck source=hack/lib/debian-apt.sh
. "$lib"
files="$root/test/e2e/node/image"
cache="${HOTPLUGD_VM_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hotplugd/vm}"
check=false
case "${1:-}" in
--check) check=true ;;
"") ;;
*)
	echo "usage: hack/node-image.sh [--check]" >&2
	exit 2
	;;
esac

# The kubelet. --check must not build: it asks hack/kubebin.sh --check
# where that script caches it.
if [ -n "${HOTPLUGD_KUBEBIN:-}" ]; then
	kubelet="$HOTPLUGD_KUBEBIN/kubelet"
elif $check; then
	kubelet="$("$root/hack/kubebin.sh" --check 2>/dev/null | tail -1)/kubelet"
else
	kubelet="$("$root/hack/kubebin.sh")/kubelet"
fi
if [ ! -x "$kubelet" ]; then
	echo "hack/node-image.sh: no kubelet at $kubelet: run hack/kubebin.sh (or set HOTPLUGD_KUBEBIN)" >&2
	exit 1
fi

# key: what the image is made of, the same in every checkout of a commit.
# File names inside the repository count too (a renamed guest file lands
# elsewhere in the guest); where the checkout is does not (sha256sum of a
# path prints the path, and a clone's key differed from its origin's).
key="$(
	cd "$root"
	{
		sha256sum <"$self"
		sha256sum <"$lib"
		find test/e2e/node/image -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
		find test/e2e/node/agent -maxdepth 1 -name '*.go' -type f -print0 | LC_ALL=C sort -z | xargs -0 sha256sum
		sha256sum <"$kubelet"
	} | sha256sum | cut -c1-16
)"
dir="$cache/node-$key"

complete() {
	[ -f "$1/VERSIONS" ] && [ -f "$1/vmlinuz" ] && [ -f "$1/initrd.img" ] && [ -f "$1/disk.img" ]
}

if complete "$dir"; then
	echo "$dir"
	exit 0
fi
if $check; then
	echo "hack/node-image.sh: no node image in $dir: run hack/node-image.sh" >&2
	exit 1
fi
if [ "$(id -u)" != 0 ]; then
	echo "hack/node-image.sh: must run as root (mmdebstrap --mode=root, chroot)" >&2
	exit 1
fi
for tool in apt-get apt-cache dpkg-deb unshare chroot mkfs.ext4 perl go; do
	command -v "$tool" >/dev/null || { echo "hack/node-image.sh: $tool is needed" >&2; exit 1; }
done

uri="$(debian_mirror)"
if [ -z "$uri" ]; then
	echo "hack/node-image.sh: no Debian mirror for bookworm in /etc/apt/sources.list{,.d/}; set HOTPLUGD_VM_MIRROR" >&2
	exit 1
fi

start=$(date +%s)
echo "hack/node-image.sh: building the node image (Debian bookworm from $uri) into $dir" >&2
mkdir -p "$cache"
rm -rf "$dir"
tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
chmod 0755 "$tmp" # apt (as _apt) reads the tree's lists under it
# mmdebstrap runs in its own PID namespace, as this PID's child: on any exit
# it is killed (with everything it started) before its tree is removed, and
# its mounts were never visible outside its namespace.
mm_pid=""
cleanup() {
	if [ -n "$mm_pid" ]; then
		kill -KILL "$mm_pid" 2>/dev/null || true
		wait "$mm_pid" 2>/dev/null || true
	fi
	rm -rf "$tmp"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

# A private apt state to fetch mmdebstrap (and whichever of its Depends this
# machine lacks).
apt="$tmp/apt"
mkdir -p "$tmp/debs" "$tmp/mm"
private_apt "$apt" "$uri" bookworm
opts=("${apt_opts[@]}")
signed="$apt_signed"
mapfile -t mmpkgs < <(apt-get "${opts[@]}" -s --no-install-recommends install mmdebstrap 2>/dev/null |
	awk '$1=="Inst" { v=$3; if (v ~ /^\[/) v=$4; gsub(/[()]/, "", v); print $2 "=" v }')
[ ${#mmpkgs[@]} -gt 0 ] || { echo "hack/node-image.sh: apt finds no mmdebstrap in bookworm" >&2; exit 1; }
(cd "$tmp/debs" && apt-get "${opts[@]}" -qq download "${mmpkgs[@]}") >&2
for deb in "$tmp/debs"/*.deb; do
	dpkg-deb -x "$deb" "$tmp/mm"
done
mmdebstrap_version="$(dpkg-deb -f "$tmp/debs"/mmdebstrap_*.deb Version)"
export PATH="$tmp/mm/usr/bin:$tmp/mm/usr/sbin:$PATH"
export PERL5LIB="$tmp/mm/usr/share/perl5${PERL5LIB:+:$PERL5LIB}"

echo "hack/node-image.sh: building the agent" >&2
(cd "$root" && CGO_ENABLED=0 go build -trimpath -ldflags '-s -w' -o "$tmp/e2e-agent" ./test/e2e/node/agent) >&2

# The customize hook, run by mmdebstrap after every package is installed,
# with the chroot's /proc, /sys and /dev mounted; $1 is the tree. It reads
# the NODE_IMAGE_* variables exported below.
cat >"$tmp/customize.sh" <<'EOF'
#!/bin/sh
set -eu
t="$1"
# The guest's configuration files, owned by root, over the packages' own.
# /lib, /bin and /sbin are symlinks into /usr (merged /usr): kept.
tar -C "$NODE_IMAGE_FILES" --owner=0 --group=0 --numeric-owner --mode=go-w -cf - . |
	tar -C "$t" -xf - --no-overwrite-dir --keep-directory-symlink
install -m 0755 "$NODE_IMAGE_KUBELET" "$t/usr/bin/kubelet"
install -D -m 0755 "$NODE_IMAGE_AGENT" "$t/usr/local/sbin/e2e-agent"
mkdir -p "$t/var/log/journal"
chroot "$t" systemctl enable containerd.service systemd-networkd.service e2e-agent.service
# What slows a boot under TCG and a test node does not need. apparmor.service
# loads the profiles in /etc/apparmor.d (lsb_release, nvidia_modprobe):
# 3.7 s before sysinit.target under TCG; containerd loads its own profile
# with apparmor_parser when it first needs it.
for unit in apparmor.service apt-daily.timer apt-daily-upgrade.timer dpkg-db-backup.timer e2scrub_all.timer \
	e2scrub_reap.service fstrim.timer man-db.timer systemd-timesyncd.service; do
	if [ -e "$t/usr/lib/systemd/system/$unit" ]; then
		chroot "$t" systemctl disable "$unit"
	fi
done
# The initramfs again, with /etc/initramfs-tools as copied above.
chroot "$t" update-initramfs -u -k all
# shellcheck disable=SC2016 # dpkg-query's format, not the shell's
chroot "$t" dpkg-query -W -f '${Package} ${Version} ${Installed-Size}\n' >"$NODE_IMAGE_PACKAGES"
EOF
chmod +x "$tmp/customize.sh"
export NODE_IMAGE_FILES="$files" NODE_IMAGE_KUBELET="$kubelet" NODE_IMAGE_AGENT="$tmp/e2e-agent" NODE_IMAGE_PACKAGES="$tmp/packages"

# Packages beyond minbase: what a kubeadm node runs (no conntrack or
# iptables: the test's pods are hostNetwork and there is no kube-proxy).
# apparmor: Debian's kernel enables AppArmor, and containerd 1.6 then loads
# its default profile for every unprivileged container with apparmor_parser
# (without it, every such container fails). The merged-usr hook (of
# mmdebstrap) makes /usr merged from the start and installs usr-is-merged,
# so that usrmerge (which pulls in perl) is not.
include=systemd,systemd-sysv,dbus,udev,kmod,iproute2,procps,util-linux,mount,containerd,runc,apparmor
include+=,linux-image-cloud-amd64,initramfs-tools,ca-certificates
echo "hack/node-image.sh: running mmdebstrap $mmdebstrap_version" >&2
TMPDIR="$tmp" unshare --mount --propagation private --pid --fork --kill-child \
	perl "$tmp/mm/usr/bin/mmdebstrap" --mode=root --variant=minbase --include="$include" \
	--hook-dir="$tmp/mm/usr/share/mmdebstrap/hooks/merged-usr" \
	--dpkgopt='path-exclude=/usr/share/doc/*' --dpkgopt='path-exclude=/usr/share/man/*' \
	--dpkgopt='path-exclude=/usr/share/locale/*' --dpkgopt='path-exclude=/usr/share/info/*' \
	--dpkgopt='path-exclude=/usr/share/lintian/*' \
	--customize-hook="$(printf %q "$tmp/customize.sh") \"\$1\"" \
	bookworm "$tmp/tree" "deb$signed $uri bookworm main" >&2 &
mm_pid=$!
wait "$mm_pid"
mm_pid=""

tree="$tmp/tree"
kernels=("$tree"/boot/vmlinuz-*)
if [ ${#kernels[@]} != 1 ] || [ ! -f "${kernels[0]}" ]; then
	echo "hack/node-image.sh: not one kernel in the image: ${kernels[*]}" >&2
	exit 1
fi
kver="${kernels[0]##*/vmlinuz-}"
cp "$tree/boot/vmlinuz-$kver" "$tmp/vmlinuz"
cp "$tree/boot/initrd.img-$kver" "$tmp/initrd.img"
{
	echo "kernel $kver"
	echo "kubelet $("$kubelet" --version)"
	echo "containerd $(chroot "$tree" containerd --version)"
	echo "runc $(chroot "$tree" runc --version | head -n1)"
	echo "systemd $(chroot "$tree" systemctl --version | head -n1)"
	echo "mmdebstrap $mmdebstrap_version"
	echo "mirror $uri bookworm main"
	echo "packages $(wc -l <"$tmp/packages"), $(awk '{ s += $3 } END { printf "%d MiB", s / 1024 }' "$tmp/packages") installed"
} >"$tmp/VERSIONS.tmp"

echo "hack/node-image.sh: making disk.img" >&2
mkfs.ext4 -q -L root -d "$tree" "$tmp/disk.img" 4G >&2
rm -rf "$tree" "$apt" "$tmp/debs" "$tmp/mm" "$tmp/e2e-agent" "$tmp/customize.sh"
mv "$tmp/packages" "$tmp/PACKAGES"
echo "build_seconds $(($(date +%s) - start))" >>"$tmp/VERSIONS.tmp"
mv "$tmp/VERSIONS.tmp" "$tmp/VERSIONS"
# -T: should a concurrent run have finished first, keep its directory.
mv -T "$tmp" "$dir" 2>/dev/null || rm -rf "$tmp"
trap - EXIT
# The images of other keys (an earlier script, guest file or kubelet), about
# 530 MB each, are of no use to this checkout any more: removed. A run
# still using one copied it when it started (test/e2e/node's newNode).
for old in "$cache"/node-*; do
	case "$old" in
	"$dir" | "$cache"/node-*.tmp.*) ;;
	*) [ -d "$old" ] && [ -f "$old/disk.img" ] && echo "hack/node-image.sh: removing the older image $old" >&2 && rm -rf "$old" ;;
	esac
done
echo "hack/node-image.sh: done in $(($(date +%s) - start))s: $(du -sh "$dir" | cut -f1) on disk" >&2
echo "$dir"
