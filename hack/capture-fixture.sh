#!/usr/bin/env bash
# Usage: hack/capture-fixture.sh OUT.tar.gz
#
# Captures this machine's CPU, NUMA, memory-block and hugepage files from
# sysfs and procfs into a gzip tar whose members are rooted at sys/ and proc/,
# the layout internal/fixturegen generates. File contents are
# read with cat (sysfs reports every attribute as 4096 bytes); node cpuN links
# stay symlinks with the kernel's relative target. Missing files are skipped:
# offline CPUs have no topology directory, kernels without CONFIG_NUMA have no
# node directory, and so on. Archive order, mtimes and owners are fixed, so a
# rerun differs only where the machine's values changed (e.g. MemFree).
#
# ROOT (default empty, i.e. /) reads from another tree, e.g. an extracted
# fixture. Run as root to read every file; nothing on the machine is changed.
set -euo pipefail
shopt -s nullglob

if [[ $# -ne 1 ]]; then
	echo "usage: $0 OUT.tar.gz" >&2
	exit 2
fi
out=$1
root=${ROOT:-}
root=${root%/}

stage=$(mktemp -d)
trap 'rm -rf "$stage"' EXIT

# copy REL...: copies each readable regular file ROOT/REL to STAGE/REL.
copy() {
	local rel
	for rel in "$@"; do
		[[ -f $root/$rel && ! -L $root/$rel ]] || continue
		mkdir -p "$stage/${rel%/*}"
		if ! cat "$root/$rel" >"$stage/$rel" 2>/dev/null; then
			rm -f "$stage/$rel" # e.g. write-only or EIO attributes
		fi
	done
}

# link REL: recreates the symlink ROOT/REL with the same target.
link() {
	[[ -L $root/$1 ]] || return 0
	mkdir -p "$stage/${1%/*}"
	ln -s "$(readlink "$root/$1")" "$stage/$1"
}

rel() { printf '%s\n' "${1#"$root"/}"; }

cpu=sys/devices/system/cpu
copy $cpu/{online,present,possible,offline,kernel_max}
for d in "$root"/$cpu/cpu[0-9]*; do
	d=$(rel "$d")
	copy "$d/online" "$d"/topology/{physical_package_id,die_id,core_id,thread_siblings_list,core_siblings_list}
done

node=sys/devices/system/node
copy $node/{online,possible,has_cpu,has_memory,has_normal_memory}
for d in "$root"/$node/node[0-9]*; do
	d=$(rel "$d")
	copy "$d"/{cpulist,cpumap,meminfo,distance}
	for l in "$root/$d"/cpu[0-9]*; do
		link "$(rel "$l")"
	done
	for h in "$root/$d"/hugepages/hugepages-*; do
		h=$(rel "$h")
		copy "$h"/{nr_hugepages,free_hugepages,surplus_hugepages}
	done
done

mem=sys/devices/system/memory
copy $mem/{block_size_bytes,auto_online_blocks}
for d in "$root"/$mem/memory[0-9]*; do
	d=$(rel "$d")
	copy "$d"/{state,online,phys_device,valid_zones}
done

for h in "$root"/sys/kernel/mm/hugepages/hugepages-*; do
	h=$(rel "$h")
	copy "$h"/{nr_hugepages,free_hugepages,resv_hugepages,surplus_hugepages,nr_overcommit_hugepages}
done

copy proc/meminfo proc/sys/vm/nr_hugepages proc/cpuinfo

find "$stage" -type d -exec chmod 0755 {} +
find "$stage" -type f -exec chmod 0644 {} +
tops=()
for t in proc sys; do
	[[ -e $stage/$t ]] && tops+=("$t")
done
if [[ ${#tops[@]} -eq 0 ]]; then
	echo "$0: nothing captured under ${root:-/}" >&2
	exit 1
fi
tar -C "$stage" --sort=name --mtime=@0 --owner=0 --group=0 --numeric-owner \
	--format=gnu -cf - "${tops[@]}" | gzip -9 -n >"$out.tmp"
mv "$out.tmp" "$out"
