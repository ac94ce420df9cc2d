#!/usr/bin/env bash
# Builds the real Kubernetes and etcd programs the tests run (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, etcd) from the Go module proxy, pinned by test/kubebin/go.mod, and
# prints the directory that holds them. The binaries are cached under
# ${HOTPLUGD_KUBEBIN_CACHE:-~/.cache/hotplugd/kubebin}/<hash of go.mod and go.sum>,
# so only the first run on a machine pays the build (~8 min on 2 cores).
#
#   hack/kubebin.sh            build if needed, print the directory
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
mod="$root/test/kubebin"
key="$(cat "$mod/go.mod" "$mod/go.sum" | sha256sum | cut -c1-16)"
cache="${HOTPLUGD_KUBEBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hotplugd/kubebin}"
dir="$cache/$key"
k8s_version="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$mod/go.mod")"

progs=(kube-apiserver kube-controller-manager kube-scheduler kubelet etcd)
missing=()
for p in "${progs[@]}"; do
	[ -x "$dir/$p" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "$dir"
	exit 0
fi

mkdir -p "$dir"
tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# The version the kubelet reports on its Node and the API server on /version;
# without these both say v0.0.0-master.
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$k8s_version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$k8s_version" | cut -d. -f2) -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
start=$(date +%s)
echo "hack/kubebin.sh: building ${missing[*]} ($k8s_version) into $dir (first run only, several minutes)" >&2
(
	cd "$mod"
	for p in "${missing[@]}"; do
		case "$p" in
		etcd) CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$tmp/etcd" go.etcd.io/etcd/server/v3 ;;
		*) CGO_ENABLED=0 go build -trimpath -ldflags "$ldflags" -o "$tmp/$p" "k8s.io/kubernetes/cmd/$p" ;;
		esac
	done
) >&2
mv "$tmp"/* "$dir/"
echo "hack/kubebin.sh: built in $(( $(date +%s) - start ))s" >&2
echo "$dir"
