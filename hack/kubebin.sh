#!/usr/bin/env bash
# Builds the real Kubernetes and etcd programs the tests run (kube-apiserver,
# kube-controller-manager, kube-scheduler, kubelet, etcd) from one kubelet
# release's own module graph, and prints the directory that holds them.
#
# They are built in the module of the kubelet oracle tests
# (test/kubeletcompat), with that release's module file (go.mod for its own
# release, modules/k8s-<version>.mod for the others, hack/compat-modules.sh)
# and with the flags of every other build of the test suite (CGO_ENABLED=0,
# -trimpath; the Makefile exports both): the kubelet packages compiled for a
# release's oracle tests are the ones its kubelet is linked from, and `make
# test` compiles each release's Kubernetes once. The binaries are cached
# under ${HOTPLUGD_KUBEBIN_CACHE:-~/.cache/hotplugd/kubebin}/<version>-<hash
# of the module file, its checksums, the Go release and the build flags>, so
# only the first run on a machine pays the link (and the compilation the
# oracle tests have not done yet).
#
#   hack/kubebin.sh                      the e2e's release (v1.37.2): every program
#   hack/kubebin.sh v1.34.4 kubelet      only these programs of another release
#   hack/kubebin.sh --check [VERSION [PROGRAM...]]
#                                        print the directory without building;
#                                        exit 1 if a program is missing
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
compat="$root/test/kubeletcompat"
# The release the integration and end-to-end tests run: the current one.
e2e_release=v1.37.2
GO="${GO:-go}"

check=0
if [ "${1:-}" = --check ]; then
	check=1
	shift
fi
version="${1:-$e2e_release}"
shift || true
progs=("$@")
[ ${#progs[@]} -gt 0 ] || progs=(kube-apiserver kube-controller-manager kube-scheduler kubelet etcd)

base="$(awk '$1=="k8s.io/kubernetes" && $2 ~ /^v/ {print $2; exit}' "$compat/go.mod")"
if [ "$version" = "$base" ]; then
	modfile=go.mod
else
	modfile="modules/k8s-$version.mod"
fi
if [ ! -f "$compat/$modfile" ]; then
	echo "hack/kubebin.sh: no module file for kubelet $version (test/kubeletcompat/$modfile): hack/compat-modules.sh $version makes one" >&2
	exit 2
fi
sum="${modfile%.mod}.sum"
flags="CGO_ENABLED=0 -trimpath"
key="$( (cat "$compat/$modfile" "$compat/$sum"; $GO env GOVERSION; echo "$flags") | sha256sum | cut -c1-16)"
cache="${HOTPLUGD_KUBEBIN_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hotplugd/kubebin}"
dir="$cache/$version-$key"

missing=()
for p in "${progs[@]}"; do
	[ -x "$dir/$p" ] || missing+=("$p")
done
if [ ${#missing[@]} -eq 0 ]; then
	echo "$dir"
	exit 0
fi
if [ $check = 1 ]; then
	echo "hack/kubebin.sh: $dir lacks ${missing[*]}: run hack/kubebin.sh $version ${progs[*]}" >&2
	echo "$dir"
	exit 1
fi

mkdir -p "$dir"
tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
# The version the kubelet reports on its Node and the API server on /version;
# without these both say v0.0.0-master.
pkg=k8s.io/component-base/version
ldflags="-s -w -X $pkg.gitVersion=$version -X $pkg.gitMajor=1 -X $pkg.gitMinor=$(echo "$version" | cut -d. -f2) -X $pkg.gitTreeState=clean -X $pkg.buildDate=1970-01-01T00:00:00Z"
start=$(date +%s)
echo "hack/kubebin.sh: building ${missing[*]} ($version) into $dir" >&2
targets=()
for p in "${missing[@]}"; do
	case "$p" in
	etcd) targets+=(go.etcd.io/etcd/server/v3) ;;
	kube-apiserver | kube-controller-manager | kube-scheduler | kubelet) targets+=("k8s.io/kubernetes/cmd/$p") ;;
	*)
		echo "hack/kubebin.sh: unknown program $p" >&2
		exit 2
		;;
	esac
done
# One go build for every program: its packages are compiled once and the
# links run in parallel. etcd's main package is go.etcd.io/etcd/server/v3,
# whose binary go build names "server".
(
	cd "$compat"
	CGO_ENABLED=0 $GO build -modfile="$modfile" -trimpath -ldflags "$ldflags" -o "$tmp/" "${targets[@]}"
) >&2
[ ! -e "$tmp/server" ] || mv "$tmp/server" "$tmp/etcd"
mv "$tmp"/* "$dir/"
echo "hack/kubebin.sh: built in $(($(date +%s) - start))s" >&2
echo "$dir"
