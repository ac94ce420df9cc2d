// Package testimage builds the small OCI images the end-to-end tests run
// (test/e2e/images: the pause image and the pinned workload) with
// hack/image, the tool behind `make image`, runs `make image` itself, and
// knows the digest line that tool and `make image` end with.
//
// It is its own package because two test packages need the same images:
// test/e2e (a kubelet on this machine) and test/e2e/node (a kubelet in a
// VM). Nothing of hotplugd imports it.
package testimage

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"time"
)

// DigestLine is how `make image` and the image tool end their output.
var DigestLine = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// The names test/e2e/images are built under.
const (
	PauseName    = "hotplugd.test/pause:e2e"
	WorkloadName = "hotplugd.test/workload:e2e"
)

// Image is an OCI archive and the digest of its index.
type Image struct {
	Archive string
	Digest  string
	// Name is the image's name in containerd once imported, without tag
	// or digest.
	Name string
}

// Ref is the image by digest, as a pod or a kustomization names it.
func (i Image) Ref() string { return i.Name + "@" + i.Digest }

// HotplugdName is the name deploy/kubernetes gives hotplugd's image.
const HotplugdName = "ghcr.io/hotplugd/hotplugd"

// Make runs `make image` in the repository at root and returns its
// bin/image/hotplugd.oci.tar with the index digest `make image` prints
// last, named as deploy/kubernetes names it, and how long it took.
func Make(root string) (Image, time.Duration, error) {
	start := time.Now()
	out, err := exec.Command("make", "-s", "--no-print-directory", "-C", root, "image").CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return Image{}, took, fmt.Errorf("make image: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if !DigestLine.MatchString(last) {
		return Image{}, took, fmt.Errorf("make image did not end with the index digest; its output:\n%s", out)
	}
	return Image{Archive: filepath.Join(root, "bin", "image", "hotplugd.oci.tar"), Digest: last, Name: HotplugdName}, took, nil
}

// Tool builds hack/image of the repository at root into dir and returns
// the binary.
func Tool(root, dir string) (string, error) {
	p := filepath.Join(dir, "image-tool")
	cmd := exec.Command("go", "build", "-o", p, ".")
	cmd.Dir = filepath.Join(root, "hack", "image")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building hack/image: %v\n%s", err, out)
	}
	return p, nil
}

// GoBuild builds a static linux/amd64 binary of the package pkg (relative
// to the repository at root) as dir/out/<base of out>, with ldflags.
func GoBuild(root, dir, pkg, out, ldflags string) (string, error) {
	p := filepath.Join(dir, out, filepath.Base(out))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", p, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return p, nil
}

// Build builds, with the image tool, a one-platform (linux/amd64) image
// holding the static binary at /<base name of binary>, its entrypoint,
// named name, beside the binary.
func Build(tool, binary, name string) (Image, error) {
	base := filepath.Base(binary)
	archive := filepath.Join(filepath.Dir(binary), base+".oci.tar")
	cmd := exec.Command(tool, "build",
		"--platform", "linux/amd64="+binary, "--path", "/"+base, "--entrypoint", "/"+base,
		"--epoch", "0", "--name", name, "--out", archive)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return Image{}, fmt.Errorf("building image %s: %v\n%s%s", name, err, out, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	digest := strings.TrimSpace(lines[len(lines)-1])
	if !DigestLine.MatchString(digest) {
		return Image{}, fmt.Errorf("the image tool did not end with a digest:\n%s", out)
	}
	repo, _, _ := strings.Cut(name, ":")
	return Image{Archive: archive, Digest: digest, Name: repo}, nil
}

// Package builds test/e2e/images/<pkg> of the repository at root into an
// image named name, under dir.
func Package(root, dir, tool, pkg, name string) (Image, error) {
	bin, err := GoBuild(root, filepath.Join(dir, "images"), "./test/e2e/images/"+pkg, pkg, "-s -w")
	if err != nil {
		return Image{}, err
	}
	return Build(tool, bin, name)
}

// ImportedAs parses `ctr images import`'s output, "unpacking NAME
// (sha256:...)...done", into the name and digest it imported.
func ImportedAs(out []byte) (name, digest string, ok bool) {
	m := importLine.FindStringSubmatch(string(out))
	if m == nil {
		return "", "", false
	}
	return m[1], m[2], true
}

var importLine = regexp.MustCompile(`unpacking (\S+) \((sha256:[0-9a-f]{64})\)`)
