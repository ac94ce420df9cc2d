#!/usr/bin/env bash
# Builds one of the pinned command-line tools the tests run, from the Go
# module proxy with `go install <module>@<version>` (the tool's own go.mod,
# never hotplugd's), and prints the path of its binary. Cached under
# ${HOTPLUGD_TOOLS_CACHE:-~/.cache/hotplugd/tools}/<name>-<version>, so only
# the first run on a machine pays the build.
#
#   hack/tool.sh kustomize     sigs.k8s.io/kustomize/kustomize/v5
#   hack/tool.sh promtool      github.com/prometheus/prometheus/cmd/promtool
#   hack/tool.sh helm          helm.sh/helm/v4/cmd/helm
set -euo pipefail
tags=
name="${1:?usage: hack/tool.sh kustomize|promtool|helm}"
case "$name" in
# v5.8.3 needs Go 1.27; v5.8.1 is the newest that builds with go.mod's Go.
kustomize) pkg=sigs.k8s.io/kustomize/kustomize/v5 version=v5.8.1 ;;
# Prometheus 3.x's Go module is v0.3xx.y. v0.316.0 (go 1.26.7, no replace
# directive) is the newest; v0.315.1 and earlier (checked back to v0.310.0)
# carry replace directives, which `go install module@version` refuses.
# remove_all_sd leaves out the service discovery plugins (cloud SDKs) that
# checking and testing rules never use: about 4 minutes cold on 2 cores
# instead of 13.
promtool) pkg=github.com/prometheus/prometheus/cmd/promtool version=v0.316.0 tags=remove_all_sd ;;
# Helm 4 (the chart in deploy/helm is apiVersion v2, which Helm 3 reads too).
helm) pkg=helm.sh/helm/v4/cmd/helm version=v4.3.1 ;;
*)
	echo "hack/tool.sh: unknown tool $name" >&2
	exit 2
	;;
esac
cache="${HOTPLUGD_TOOLS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hotplugd/tools}"
dir="$cache/$name-$version${tags:+-$tags}"
if [ -x "$dir/$name" ]; then
	echo "$dir/$name"
	exit 0
fi
mkdir -p "$cache"
tmp="$(mktemp -d "$dir.tmp.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
echo "hack/tool.sh: building $name $version (first run only)" >&2
CGO_ENABLED=0 GOBIN="$tmp" go install -trimpath ${tags:+-tags "$tags"} "$pkg@$version" >&2
rm -rf "$dir"
mv "$tmp" "$dir"
trap - EXIT
echo "$dir/$name"
