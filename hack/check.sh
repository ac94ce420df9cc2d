#!/usr/bin/env bash
# The inner loop (make check): gofmt, go vet and the unit tests of the Go
# packages a change touches, in well under a minute on a warm build cache.
# The change is the work tree's uncommitted and untracked files, or, with an
# argument, everything that differs from that revision (make check
# BASE=origin/main). `make test` runs everything; this runs what a change most
# likely broke.
#
#   - gofmt -l over the changed .go files;
#   - go vet over the changed packages of each module: hotplugd's (with the
#     e2e tag), hack/image, and the oracle tests (test/kubeletcompat) for
#     go.mod's kubelet release and for each release whose tagged files
#     (kubelet_1_<minor>) changed;
#   - go test -short over the changed packages of hotplugd's module and
#     hack/image, -race for those make unit runs with -race (RACE_PKGS);
#     not the integration and end-to-end tests (test/integration, test/e2e,
#     test/systemd: root, a real API server or a VM), which are vetted only,
#     nor the oracle tests (make compat).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
GO="${GO:-go}"
export CGO_ENABLED=0
GOFLAGS="$(echo "-trimpath $($GO env GOFLAGS)" | xargs -n1 | sort -u | xargs)"
export GOFLAGS

if [ $# -gt 0 ]; then
	files="$( (git diff --name-only "$1" --; git ls-files --others --exclude-standard) | sort -u)"
	what="since $1"
else
	files="$( (git diff --name-only HEAD --; git ls-files --others --exclude-standard) | sort -u)"
	what="uncommitted"
fi
gofiles=()
while IFS= read -r f; do
	[[ "$f" == *.go && -f "$f" ]] && gofiles+=("$f")
done <<<"$files"
if [ ${#gofiles[@]} -eq 0 ]; then
	echo "check: no Go file changed ($what)"
	exit 0
fi
echo "check: ${#gofiles[@]} Go files changed ($what)"

out="$(gofmt -l "${gofiles[@]}")"
if [ -n "$out" ]; then
	echo "check: gofmt needed:"
	echo "$out"
	exit 1
fi

race_pkgs=" $(make -s --no-print-directory race-pkgs) "
main=() main_tests=() main_race=() image=() compat=() compat_tags=()
for f in "${gofiles[@]}"; do
	d="./$(dirname "$f")"
	case "$d" in
	./bin/* | */testdata | */testdata/*) continue ;;
	./hack/image | ./hack/image/*)
		rel="${d#./hack/image}"
		image+=("./${rel#/}")
		;;
	./test/kubeletcompat | ./test/kubeletcompat/*)
		rel="${d#./test/kubeletcompat}"
		compat+=("./${rel#/}")
		tag="$(sed -n 's#^//go:build .*\(kubelet_1_[0-9]*\).*#\1#p' "$f" | head -1)"
		[ -z "$tag" ] || compat_tags+=("$tag")
		;;
	*)
		main+=("$d")
		case "$d" in
		./test/integration* | ./test/e2e* | ./test/systemd*) ;;
		*)
			if [[ "$race_pkgs" == *" $d "* ]]; then main_race+=("$d"); else main_tests+=("$d"); fi
			;;
		esac
		;;
	esac
done
uniq_args() { printf '%s\n' "$@" | sort -u | sed 's#^\./$#.#'; }

if [ ${#main[@]} -gt 0 ]; then
	mapfile -t main < <(uniq_args "${main[@]}")
	echo "check: go vet ${main[*]}"
	$GO vet -tags e2e "${main[@]}"
	if [ ${#main_race[@]} -gt 0 ]; then
		mapfile -t main_race < <(uniq_args "${main_race[@]}")
		CGO_ENABLED=1 $GO test -vet=off -short -race -count=1 "${main_race[@]}"
	fi
	if [ ${#main_tests[@]} -gt 0 ]; then
		mapfile -t main_tests < <(uniq_args "${main_tests[@]}")
		$GO test -vet=off -short -count=1 "${main_tests[@]}"
	fi
fi
if [ ${#image[@]} -gt 0 ]; then
	mapfile -t image < <(uniq_args "${image[@]}")
	(cd hack/image && $GO vet "${image[@]}" && $GO test -vet=off -short -count=1 "${image[@]}")
fi
if [ ${#compat[@]} -gt 0 ]; then
	mapfile -t compat < <(uniq_args "${compat[@]}")
	echo "check: go vet ${compat[*]} (test/kubeletcompat, go.mod's release)"
	(cd test/kubeletcompat && $GO vet "${compat[@]}")
	if [ ${#compat_tags[@]} -gt 0 ]; then
		for tag in $(printf '%s\n' "${compat_tags[@]}" | sort -u); do
			minor="${tag#kubelet_1_}"
			mod="$(ls test/kubeletcompat/modules/k8s-v1."$minor".*.mod 2>/dev/null | head -1)"
			[ -n "$mod" ] || continue # go.mod's own release, vetted above
			echo "check: go vet ${compat[*]} (test/kubeletcompat, ${mod##*/})"
			(cd test/kubeletcompat && $GO vet -modfile="modules/${mod##*/}" -tags "$tag" "${compat[@]}")
		done
	fi
fi
echo "check: ok"
