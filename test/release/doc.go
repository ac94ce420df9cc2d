// Package release tests `make release` (hack/release.sh, docs/release.md)
// as a release manager runs it, because a release's promise is one no unit
// test can keep: the same commit gives the same files, byte for byte, so
// anyone can rebuild a release and check its SHA256SUMS.
//
// TestReleaseReproducible takes a snapshot of the checkout (a clone of HEAD
// in a temporary directory, with the work tree's uncommitted and untracked
// files committed on top, so a concurrent edit cannot reach one build and
// not the other), moves CHANGELOG.md's Unreleased entries under a version,
// tags it, and runs the release twice into two directories: once taking the
// version from the tag, once with VERSION given. Their SHA256SUMS must be
// the same bytes, and the files what a release promises: static ELF
// binaries for x86-64 and AArch64 that are the image's, an OCI archive whose
// index digest `make image VERSION=<v>` prints too, manifests and a Helm
// chart pinned to that digest (the chart passes helm lint --strict and helm
// template), SBOMs that list the modules compiled in with their go.sum
// hashes, the CHANGELOG section. TestReleaseRefuses checks that a release
// refuses what it should (a version that is not a semantic version or not
// HEAD's tag, a dirty tree, a version CHANGELOG.md lacks) before it builds
// anything.
//
// It needs git, make, kustomize and helm (hack/tool.sh builds them once per
// machine, $HOTPLUGD_KUSTOMIZE and $HOTPLUGD_HELM name others); without them,
// and under -short, the tests skip, saying why. Warm (the build cache holds
// hotplugd's packages for both architectures, the tools are built), the
// reproducibility test takes about a minute. Cold, its first release
// compiles every package for linux/amd64 and linux/arm64 (about 10 minutes
// on 2 cores), which can outlast go test's default -timeout: the release is
// then stopped a minute before the deadline and the test skips, saying so,
// instead of go test panicking (docs/release.md has the numbers). Only test
// code lives here; nothing outside temporary directories is written but the
// Go build cache and the tools' cache.
package release
