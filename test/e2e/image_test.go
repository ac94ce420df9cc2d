//go:build e2e

package e2e

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// repoRoot is the repository (the tests run in test/e2e).
const repoRoot = "../.."

// imageName is the name deploy/kubernetes gives hotplugd's image.
const imageName = "ghcr.io/hotplugd/hotplugd"

// digestLine is how `make image` and the image tool end their output.
var digestLine = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

// image is an OCI archive and the digest of its index.
type image struct {
	Archive string
	Digest  string
	// Name is the image's name in containerd once imported, without tag
	// or digest.
	Name string
}

// Ref is the image by digest, as the kustomization pins it.
func (i image) Ref() string { return i.Name + "@" + i.Digest }

// makeImage runs `make image` in the repository and returns the digest it
// prints last, and how long it took.
func makeImage() (string, time.Duration, error) {
	start := time.Now()
	out, err := exec.Command("make", "-s", "-C", repoRoot, "image").CombinedOutput()
	took := time.Since(start)
	if err != nil {
		return "", took, fmt.Errorf("make image: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	last := strings.TrimSpace(lines[len(lines)-1])
	if !digestLine.MatchString(last) {
		return "", took, fmt.Errorf("make image did not end with the index digest; its output:\n%s", out)
	}
	return last, took, nil
}

// The images the scenarios share, built and imported into the suite's
// containerd once per run (env is set before any test runs); a failure is
// kept and fails every test that asks again.
var (
	// hotplugdImage is `make image`'s bin/image/hotplugd.oci.tar.
	hotplugdImage = sync.OnceValues(func() (image, error) {
		digest, took, err := makeImage()
		if err != nil {
			return image{}, err
		}
		fmt.Printf("e2e: make image: %s in %v\n", digest, took.Round(time.Millisecond))
		img := image{Archive: filepath.Join(repoRoot, "bin", "image", "hotplugd.oci.tar"), Digest: digest, Name: imageName}
		return img, importImage(env, img)
	})
	// workloadImage is the pinned pod's image; the pause image (the
	// sandbox image of the suite's containerd) is built and imported with
	// it.
	workloadImage = sync.OnceValues(func() (image, error) {
		if _, err := testImage("pause", pauseImage); err != nil {
			return image{}, err
		}
		return testImage("workload", "hotplugd.test/workload:e2e")
	})
	// imageTool is hack/image (the tool behind `make image`), built into
	// the run's directory.
	imageTool = sync.OnceValues(func() (string, error) {
		p := filepath.Join(env.dir, "image-tool")
		cmd := exec.Command("go", "build", "-o", p, ".")
		cmd.Dir = filepath.Join(repoRoot, "hack", "image")
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("building hack/image: %v\n%s", err, out)
		}
		return p, nil
	})
)

// testImage builds test/e2e/images/<pkg> into the image name and imports
// it.
func testImage(pkg, name string) (image, error) {
	bin, err := goBuild(env, "./test/e2e/images/"+pkg, pkg, "-s -w")
	if err != nil {
		return image{}, err
	}
	img, err := buildImage(env, bin, name)
	if err != nil {
		return image{}, err
	}
	return img, importImage(env, img)
}

// buildImage builds a one-platform (linux/amd64) image holding the static
// binary at /<base name of binary>, its entrypoint, named name, beside the
// binary.
func buildImage(s *suite, binary, name string) (image, error) {
	tool, err := imageTool()
	if err != nil {
		return image{}, err
	}
	base := filepath.Base(binary)
	archive := filepath.Join(filepath.Dir(binary), base+".oci.tar")
	cmd := exec.Command(tool, "build",
		"--platform", "linux/amd64="+binary, "--path", "/"+base, "--entrypoint", "/"+base,
		"--epoch", "0", "--name", name, "--out", archive)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return image{}, fmt.Errorf("building image %s: %v\n%s%s", name, err, out, stderr.Bytes())
	}
	lines := strings.Split(strings.TrimSpace(string(out)), "\n")
	digest := strings.TrimSpace(lines[len(lines)-1])
	if !digestLine.MatchString(digest) {
		return image{}, fmt.Errorf("the image tool did not end with a digest:\n%s", out)
	}
	repo, _, _ := strings.Cut(name, ":")
	return image{Archive: archive, Digest: digest, Name: repo}, nil
}

// goBuild builds a static binary of the package at pkg (relative to the
// repository) into the run's directory, with ldflags.
func goBuild(s *suite, pkg, out, ldflags string) (string, error) {
	p := filepath.Join(s.dir, "images", out, filepath.Base(out))
	cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", p, pkg)
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %v\n%s", pkg, err, out)
	}
	return p, nil
}

// importImage imports the archive into the suite's containerd, in the
// kubelet's namespace, and names it by digest too: containerd's CRI finds an
// image by the names it has, and a pod names it by digest.
func importImage(s *suite, img image) error {
	out, err := s.containerd.ctr("images", "import", img.Archive)
	if err != nil {
		return err
	}
	// "unpacking ghcr.io/hotplugd/hotplugd:v1 (sha256:...)...done"
	m := regexp.MustCompile(`unpacking (\S+) \((sha256:[0-9a-f]{64})\)`).FindStringSubmatch(string(out))
	if m == nil {
		return fmt.Errorf("ctr images import %s: no image named in its output:\n%s", img.Archive, out)
	}
	if m[2] != img.Digest {
		return fmt.Errorf("ctr imported %s as %s, want the index digest %s", m[1], m[2], img.Digest)
	}
	_, err = s.containerd.ctr("images", "tag", "--force", m[1], img.Ref())
	return err
}

// TestImage is `make image`'s must-show: run twice from the same tree it
// prints the same index digest, and the image runs (`hotplugd version`
// through containerd's ctr run).
func TestImage(t *testing.T) {
	s := setup(t)
	img, err := hotplugdImage()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(filepath.Join(repoRoot, "bin", "image")); err != nil {
		t.Fatal(err)
	}
	second, took, err := makeImage()
	if err != nil {
		t.Fatal(err)
	}
	if second != img.Digest {
		t.Errorf("make image twice: %s, then %s: not reproducible", img.Digest, second)
	}
	out, err := s.containerd.ctr("run", "--rm", "--cgroup", "", img.Ref(), "e2e-image-version", "/hotplugd", "version")
	if err != nil {
		t.Fatal(err)
	}
	version := strings.TrimSpace(string(out))
	if !strings.HasPrefix(version, "hotplugd ") {
		t.Errorf("hotplugd version in the image printed %q", version)
	}
	pin := checkPin(t, second)
	note := fmt.Sprintf("twice: %s both times (second build %.1f s); `ctr run` of it: %q; %s", second, took.Seconds(), version, pin)
	results.add(result{scenario: "0 image", side: "make image", change: "-", correct: "-", writes: -1, note: note})
}

// checkPin compares the digest deploy/kubernetes pins with the one this
// tree builds, when the image's inputs are committed (a dirty tree builds a
// -dirty image, which nothing pins), and says what it found.
func checkPin(t *testing.T, built string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "deploy", "kubernetes", "kustomization.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*digest:\s*(sha256:[0-9a-f]{64})\s*$`).FindSubmatch(b)
	if m == nil {
		t.Errorf("deploy/kubernetes/kustomization.yaml pins no digest: run `make pin-image` and commit it")
		return "no pin"
	}
	pinned := string(m[1])
	// What goes into the image, as git pathspecs (the Makefile's IMAGE_INPUTS).
	inputs, err := exec.Command("make", "-s", "-C", repoRoot, "image-inputs").Output()
	if err != nil {
		t.Fatalf("make image-inputs: %v", err)
	}
	cmd := exec.Command("git", append([]string{"status", "--porcelain", "--"}, strings.Fields(string(inputs))...)...)
	cmd.Dir = repoRoot
	out, err := cmd.Output()
	switch {
	case err != nil:
		t.Logf("pin not compared: git status: %v", err)
		return "pin not compared (no git)"
	case len(bytes.TrimSpace(out)) > 0:
		t.Logf("pin not compared: the image's inputs have uncommitted changes:\n%s", out)
		return "pin not compared (uncommitted inputs)"
	case pinned != built:
		t.Errorf("deploy/kubernetes pins %s, but this commit builds %s: run `make pin-image` and commit it", pinned, built)
		return "pin stale"
	}
	return "deploy/kubernetes pins it"
}
