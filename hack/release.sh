#!/usr/bin/env bash
# Makes a release of hotplugd (make release, docs/release.md): writes $DIST
# (default dist/) with
#
#   hotplugd-<v>-linux-amd64, -arm64   the static binaries of the image
#   hotplugd-<v>-linux-<arch>.spdx.json  an SPDX 2.3 SBOM of each binary
#   hotplugd-<v>.oci.tar               the OCI archive of make image
#   hotplugd-<v>.yaml                  deploy/kubernetes (report only),
#   hotplugd-<v>-restart-kubelet.yaml  and with each opt-in component,
#   hotplugd-<v>-monitoring.yaml       the image pinned to its digest
#   hotplugd-<v without v>.tgz         the Helm chart, version, appVersion
#                                      and image digest of the release
#   CHANGELOG.md                       CHANGELOG.md's section of the release
#   SHA256SUMS                         sha256sum of every other file
#
# The version comes from the tag: without VERSION, the one vX.Y.Z (or
# vX.Y.Z-rc.N) tag on HEAD; VERSION=vX.Y.Z must be a tag on HEAD. A release
# is made from a clean tree (no uncommitted or untracked file) and needs a
# section "## [X.Y.Z]" (or "## [vX.Y.Z]") in CHANGELOG.md. RELEASE_UNTAGGED=1
# makes a trial release instead: VERSION is required and need not be a tag
# (a tag on HEAD that differs is only reported), the tree may be dirty, and
# without its section CHANGELOG.md's Unreleased one is taken, titled with
# the version. Everything is checked before anything is built.
#
# Reproducible: the same commit (and environment: SOURCE_DATE_EPOCH, IMAGE)
# gives the same bytes. The binaries and the archive are make image's (run
# with VERSION set, into a temporary IMAGE_DIR: go.mod's Go release,
# -trimpath, -buildvcs=false, the image commit's time), so the archive's
# index digest is the one `make image VERSION=<v>` prints; every other time
# (the SBOMs' creation, the chart's entries) is SOURCE_DATE_EPOCH, else
# HEAD's commit time; the manifests are the pinned kustomize's output; the
# chart's .tgz and the SBOMs are written by hack/image's chart and sbom
# commands (sorted entries, fixed headers, no clock), built by hack/image's
# go.mod's Go release (the gzip stream is its compress/flate's).
# test/release runs it twice and compares.
#
# Environment (make release passes its variables): VERSION, DIST,
# RELEASE_UNTAGGED, IMAGE (the repository the manifests and the chart name,
# ghcr.io/hotplugd/hotplugd), IMAGE_SOURCE, KUSTOMIZE_IMAGE (the images:
# entry of deploy/kubernetes to pin), IMAGE_TOOL (hack/image's binary, built
# by make image: digest and pin), HOTPLUGD_KUSTOMIZE (else hack/tool.sh kustomize), GO, MAKE,
# SOURCE_DATE_EPOCH. The last line on stdout is the image reference,
# IMAGE:<v>@<index digest>.
set -euo pipefail
export LC_ALL=C
start="$PWD"
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
MAKE="${MAKE:-make}"
DIST="${DIST:-dist}"
IMAGE="${IMAGE:-ghcr.io/hotplugd/hotplugd}"
IMAGE_SOURCE="${IMAGE_SOURCE:-https://github.com/hotplugd/hotplugd}"
KUSTOMIZE_IMAGE="${KUSTOMIZE_IMAGE:-ghcr.io/hotplugd/hotplugd}"
IMAGE_TOOL="${IMAGE_TOOL:-$root/bin/tools/hotplugd-image}"
VERSION="${VERSION:-}"

die() {
	echo "release: $*" >&2
	exit 1
}
note() { echo "release: $*" >&2; }

# vMAJOR.MINOR.PATCH, optionally -rc.N: semantic versions without leading
# zeros, so the chart's version (the same without the v) is one too.
semver='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-rc\.(0|[1-9][0-9]*))?$'

case "${RELEASE_UNTAGGED:-}" in
"" | 0) trial=false ;;
1) trial=true ;;
*) die "RELEASE_UNTAGGED=${RELEASE_UNTAGGED}: want 1 (a trial release) or nothing" ;;
esac

git rev-parse --verify -q HEAD >/dev/null 2>&1 ||
	die "$root is not a git checkout with a commit: a release is made from a commit and its tag"
commit="$(git rev-parse HEAD)"

# The version.
tags=() release_tags=()
while IFS= read -r t; do
	[ -n "$t" ] || continue
	tags+=("$t")
	if [[ $t =~ $semver ]]; then
		release_tags+=("$t")
	fi
done < <(git tag --points-at HEAD --list 'v*')
if [ -n "$VERSION" ]; then
	[[ $VERSION =~ $semver ]] ||
		die "VERSION=$VERSION is not a release version: want vMAJOR.MINOR.PATCH or vMAJOR.MINOR.PATCH-rc.N (v0.1.0, v1.2.0-rc.1)"
	version="$VERSION"
	tagged=false
	for t in "${tags[@]}"; do
		if [ "$t" = "$version" ]; then
			tagged=true
		fi
	done
	if ! $tagged; then
		if [ ${#tags[@]} -gt 0 ]; then
			msg="VERSION=$version, but HEAD ($commit) is tagged ${tags[*]}"
			$trial || die "$msg: release its tag (make release without VERSION), or make a trial release with RELEASE_UNTAGGED=1"
		else
			msg="VERSION=$version is not a tag on HEAD ($commit carries no v* tag)"
			$trial || die "$msg: tag the release commit first (git tag -a $version -m 'hotplugd $version'), or make a trial release with RELEASE_UNTAGGED=1"
		fi
		note "trial release (RELEASE_UNTAGGED=1): $msg"
	fi
else
	case ${#release_tags[@]} in
	1)
		version="${release_tags[0]}"
		note "version $version, the tag on HEAD"
		;;
	0)
		if [ ${#tags[@]} -gt 0 ]; then
			die "HEAD is tagged ${tags[*]}, none of them a release version (vMAJOR.MINOR.PATCH[-rc.N]): pass VERSION=vX.Y.Z"
		fi
		die "no VERSION given and HEAD ($commit) carries no vX.Y.Z tag: tag the release commit (git tag -a vX.Y.Z -m 'hotplugd vX.Y.Z'), or pass VERSION=vX.Y.Z RELEASE_UNTAGGED=1 for a trial release"
		;;
	*)
		die "HEAD carries several release tags (${release_tags[*]}): pass VERSION= the one to release"
		;;
	esac
fi
chart_version="${version#v}"

# Where dist goes: relative to the caller's directory (make's is the
# repository's). An existing DIST is replaced only when it is a release
# directory (it has SHA256SUMS) or empty.
case "$DIST" in
/*) dist="$DIST" ;;
*) dist="$start/$DIST" ;;
esac
dist="$(realpath -m "$dist")"
if [ "$dist" = "$root" ] || [ "$dist" = / ]; then
	die "DIST=$DIST: name a directory of its own"
fi
if [ -e "$dist" ]; then
	[ -d "$dist" ] || die "DIST=$DIST ($dist) exists and is not a directory"
	if [ -n "$(ls -A "$dist")" ] && [ ! -f "$dist/SHA256SUMS" ]; then
		die "DIST=$DIST ($dist) exists, is not empty and is not a release directory (no SHA256SUMS): remove it or choose another DIST"
	fi
fi

# A clean tree: the release is its commit. DIST itself, when inside the
# tree and not ignored, does not count.
exclude=()
case "$dist/" in
"$root"/*) exclude=(":(exclude)${dist#"$root"/}") ;;
esac
dirty="$(git status --porcelain --untracked-files=normal -- . "${exclude[@]}")"
if [ -n "$dirty" ]; then
	msg="the work tree has uncommitted or untracked files (git status):
$(head -20 <<<"$dirty")"
	$trial || die "$msg
A release of $version is made from its commit alone: commit or remove them, or make a trial release with RELEASE_UNTAGGED=1"
	note "trial release (RELEASE_UNTAGGED=1) of a dirty tree: $msg"
fi

# The release notes: CHANGELOG.md's section of the version.
[ -f CHANGELOG.md ] || die "no CHANGELOG.md"
section() {
	awk -v want="$1" '
		/^## / {
			if (p) exit
			h = $0
			sub(/^## +\[/, "", h)
			sub(/\].*$/, "", h)
			if (h == want || h == "v" want) p = 1
		}
		p && /^\[[^]]+\]: / { exit }
		p { print }
	' CHANGELOG.md
}
# The section's text without its heading: empty when it says nothing.
body() { tail -n +2 <<<"$1" | grep -v '^[[:space:]]*$' || true; }
notes="$(section "$chart_version")"
if [ -z "$(body "$notes")" ]; then
	$trial || die "CHANGELOG.md has no section \"## [$chart_version] - YYYY-MM-DD\" with the changes of $version: move the Unreleased entries under it, commit, tag, then release"
	unreleased="$(section Unreleased)"
	if [ -n "$(body "$unreleased")" ]; then
		note "trial release (RELEASE_UNTAGGED=1): CHANGELOG.md has no section for $version; its Unreleased section is taken"
		notes="## [$chart_version] - (trial release: CHANGELOG.md's Unreleased section)
$(tail -n +2 <<<"$unreleased")"
	else
		notes="## [$chart_version] - (trial release: no CHANGELOG.md section)"
	fi
fi

# Every time but the image's: SOURCE_DATE_EPOCH, else HEAD's commit time.
epoch="${SOURCE_DATE_EPOCH:-$(git log -1 --format=%ct HEAD)}"
[[ $epoch =~ ^[0-9]+$ ]] || die "SOURCE_DATE_EPOCH=$epoch: want whole seconds since 1970"

# The tools.
if [ -n "${HOTPLUGD_KUSTOMIZE:-}" ]; then
	kustomize="$HOTPLUGD_KUSTOMIZE"
else
	kustomize="$(hack/tool.sh kustomize)" || die "hack/tool.sh kustomize failed (set HOTPLUGD_KUSTOMIZE to a kustomize binary)"
fi
for c in git awk sed sha256sum realpath; do
	command -v "$c" >/dev/null || die "$c not found"
done

tmp="$(mktemp -d "${TMPDIR:-/tmp}/hotplugd-release.XXXXXX")"
trap 'rm -rf "$tmp"' EXIT
stage="$tmp/dist"
mkdir "$stage"

# hack/image for the SBOMs and the chart's archive, built by its go.mod's
# Go release like the image's binaries are by hotplugd's: IMAGE_TOOL is
# built by whatever Go make finds.
note "building hack/image (sbom, chart)"
(cd hack/image && env -u GOOS -u GOARCH GOTOOLCHAIN="go$(awk '$1 == "go" {print $2; exit}' go.mod)" \
	"$GO" build -trimpath -o "$tmp/hotplugd-image" .)

# The image and its binaries: make image's recipe, into a directory of our
# own (a concurrent make image keeps bin/image).
note "make image VERSION=$version (the binaries for linux/amd64 and linux/arm64, the OCI archive)"
"$MAKE" -s --no-print-directory -C "$root" image VERSION="$version" IMAGE="$IMAGE" IMAGE_SOURCE="$IMAGE_SOURCE" \
	IMAGE_DIR="$tmp/image" >&2
digest="$("$IMAGE_TOOL" digest --archive "$tmp/image/hotplugd.oci.tar")"
ref="$IMAGE:$version@$digest"
for arch in amd64 arm64; do
	bin="hotplugd-$version-linux-$arch"
	cp "$tmp/image/hotplugd-linux-$arch" "$stage/$bin"
	chmod 0755 "$stage/$bin"
	"$tmp/hotplugd-image" sbom --binary "$stage/$bin" --name hotplugd --version "$version" --created "$epoch" \
		--namespace "$IMAGE_SOURCE/releases/$version" --out "$stage/$bin.spdx.json"
done
cp "$tmp/image/hotplugd.oci.tar" "$stage/hotplugd-$version.oci.tar"
chmod 0644 "$stage/hotplugd-$version.oci.tar"

# The manifests: a copy of deploy/kubernetes pinned as make pin-image pins
# (the repository's files are not touched), and an overlay per component.
k="$tmp/kubernetes"
mkdir "$k"
cp -R deploy/kubernetes "$k/base"
"$IMAGE_TOOL" pin --kustomization "$k/base/kustomization.yaml" --name "$KUSTOMIZE_IMAGE" --new-name "$IMAGE" \
	--digest "$digest" >/dev/null
for variant in report restart-kubelet monitoring; do
	if [ "$variant" = report ]; then
		dir="$k/base" out="hotplugd-$version.yaml" what="deploy/kubernetes, report only"
	else
		dir="$k/$variant" out="hotplugd-$version-$variant.yaml" what="deploy/kubernetes with the component $variant"
		mkdir "$dir"
		printf '%s\n' "apiVersion: kustomize.config.k8s.io/v1beta1" "kind: Kustomization" "resources:" "  - ../base" \
			"components:" "  - ../base/components/$variant" >"$dir/kustomization.yaml"
	fi
	{
		echo "# hotplugd $version ($what): kubectl apply -f $out"
		"$kustomize" build "$dir"
	} >"$stage/$out"
	grep -qF "image: $IMAGE@$digest" "$stage/$out" || die "$out does not run $IMAGE@$digest"
done

# The chart: a copy with its links (files/ -> deploy/kubernetes) resolved,
# the release's version and appVersion, files/kustomization.yaml pinned as
# above (the chart's default image), archived reproducibly.
c="$tmp/chart/hotplugd"
mkdir "$tmp/chart"
cp -RL deploy/helm/hotplugd "$c"
for key in version appVersion; do
	[ "$(grep -c "^$key: " "$c/Chart.yaml")" = 1 ] || die "deploy/helm/hotplugd/Chart.yaml: want one line \"$key: ...\""
done
sed -i -e "s/^version: .*/version: $chart_version/" -e "s/^appVersion: .*/appVersion: \"$version\"/" "$c/Chart.yaml"
"$IMAGE_TOOL" pin --kustomization "$c/files/kustomization.yaml" --name "$KUSTOMIZE_IMAGE" --new-name "$IMAGE" \
	--digest "$digest" >/dev/null
"$tmp/hotplugd-image" chart --dir "$c" --epoch "$epoch" --out "$stage/hotplugd-$chart_version.tgz"

# The release notes.
{
	echo "# hotplugd $version"
	echo
	echo "Commit $commit. Image $ref"
	echo "(hotplugd-$version.oci.tar; the same digest as make image VERSION=$version)."
	echo
	echo "$notes"
} >"$stage/CHANGELOG.md"

(cd "$stage" && sha256sum -- *) >"$tmp/SHA256SUMS"
mv "$tmp/SHA256SUMS" "$stage/SHA256SUMS"
chmod 0644 "$stage"/*.spdx.json "$stage"/*.yaml "$stage"/*.tgz "$stage/CHANGELOG.md" "$stage/SHA256SUMS"

# Into place: next to DIST first, then swapped in.
parent="$(dirname "$dist")"
mkdir -p "$parent"
new="$(mktemp -d "$parent/.$(basename "$dist").XXXXXX")"
cp -p "$stage"/* "$new/"
chmod 0755 "$new"
rm -rf "$dist"
mv "$new" "$dist"
note "wrote $dist ($version, commit $commit):"
sed 's/^/  /' "$dist/SHA256SUMS" >&2
echo "$ref"
