// Command image builds, pushes and pins hotplugd's container image without
// Docker: `make image`, `make push` and `make pin-image` run it (docs/image.md).
// It also writes the two files of a release (`make release`, hack/release.sh,
// docs/release.md) that no other tool writes reproducibly: the SBOM of a
// binary and the Helm chart's archive.
//
//	image build --platform linux/amd64=bin/image/hotplugd-linux-amd64 \
//	    --platform linux/arm64=bin/image/hotplugd-linux-arm64 \
//	    --path /hotplugd --entrypoint /hotplugd --epoch 1767225600 \
//	    --name ghcr.io/hotplugd/hotplugd:v0.1.0 --out bin/image/hotplugd.oci.tar
//	image push --archive bin/image/hotplugd.oci.tar registry.example.com/ops/hotplugd:v0.1.0
//	image digest --archive bin/image/hotplugd.oci.tar
//	image pin --kustomization deploy/kubernetes/kustomization.yaml \
//	    --name ghcr.io/hotplugd/hotplugd --new-name registry.example.com/ops/hotplugd --digest sha256:...
//	image sbom --binary dist/hotplugd-v0.1.0-linux-amd64 --name hotplugd --version v0.1.0 \
//	    --created 1767225600 --namespace https://github.com/hotplugd/hotplugd/releases/v0.1.0 \
//	    --out dist/hotplugd-v0.1.0-linux-amd64.spdx.json
//	image chart --dir /tmp/chart/hotplugd --epoch 1767225600 --out dist/hotplugd-0.1.0.tgz
//
// # What it builds
//
// One image per platform, each with exactly one layer that holds exactly one
// file: the static binary, mode 0755, owned by 0:0, modified at the epoch
// (SOURCE_DATE_EPOCH, or the last commit's time). Nothing else is in the image
// because the daemon needs nothing else: no shell or libc (the binary is
// static, CGO_ENABLED=0), no CA bundle (it talks only to the in-cluster API
// server, whose CA the service account token's projected volume provides), no
// tzdata (it logs in UTC), no /etc/passwd (it runs as uid 0 by number, which
// the DaemonSet's securityContext states), no PATH in the environment (the
// entrypoint is an absolute path and the daemon executes nothing). The images
// go into one OCI image index, written as an OCI image layout directory and as
// an OCI archive (a tar of that layout) whose index.json names the index, so
// `ctr -n k8s.io images import` and `skopeo copy oci-archive:...` take it as it
// is.
//
// # Reproducible
//
// The same binaries, epoch, name-independent options and Go toolchain give the
// same bytes, hence the same digests: tar headers carry fixed fields (USTAR,
// no user or group names, the epoch as mtime), gzip has no name and no mtime,
// the config's created time and its one history entry are the epoch, platforms
// are sorted, and the archive is written in a fixed order with fixed headers.
// The reference name (REF) is only in the archive's index.json, never in a
// digested blob, so the index digest does not depend on where the image is
// pushed; the archive's bytes do.
//
// # The release's SBOMs and chart
//
// sbom writes an SPDX 2.3 JSON document of a Go binary from the build
// information the Go linker embeds in it (debug/buildinfo, what `go version
// -m` prints): one package for the binary (its SHA-256, the main module, the
// build settings), one for the Go standard library of its toolchain, and one
// per module compiled in, with its version and its go.sum hash (h1:). Nothing
// in it comes from the machine or the clock: its time is --created (the
// commit's), its namespace is --namespace with the binary's file name and
// SHA-256, its modules are sorted by path. It needs nothing but the standard
// library.
//
// chart writes a Helm chart directory as the .tgz `helm package` would, but
// byte for byte the same on every run: helm stamps each entry with the mtime
// of its file (and the time of day where it has none), so the archive of a
// fresh checkout changes with the checkout. Here every entry is a regular
// file named <chart>/<path> (helm's layout: no directory entries), in sorted
// order, with the fixed headers of the image's archive (USTAR, mode 0644,
// owner 0:0 without names, modified at --epoch), and the gzip stream is the
// image layers' (no name, comment or mtime). The chart's files are taken as
// they are (Chart.yaml is not re-serialized as helm does).
//
// # Why go-containerregistry and not ko
//
// ko builds Go programs into images too, but it wants a base image (by default
// it downloads one) and its own configuration (.ko.yaml, KO_DOCKER_REPO), and
// it decides the layers: it adds a base layer and a /var/run/ko layer of kodata,
// and its timestamps are its own. We need full control of the single layer and
// of every timestamp, an OCI archive on disk for `ctr images import` on a node
// without a registry, and no base image to download. go-containerregistry's
// v1 packages give exactly the pieces (layer, mutate, layout, remote, authn)
// without deciding anything for us. It lives in its own module here so that
// the daemon's go.mod does not carry it.
package main
