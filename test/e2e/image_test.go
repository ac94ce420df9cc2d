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

	"github.com/hotplugd/hotplugd/internal/testimage"
)

// repoRoot is the repository (the tests run in test/e2e).
const repoRoot = "../.."

// image is an OCI archive and the digest of its index.
type image = testimage.Image

// The images the scenarios share, built and imported into the suite's
// containerd once per run (env is set before any test runs); a failure is
// kept and fails every test that asks again.
var (
	// hotplugdImage is `make image`'s bin/image/hotplugd.oci.tar.
	hotplugdImage = sync.OnceValues(func() (image, error) {
		img, took, err := testimage.Make(repoRoot)
		if err != nil {
			return image{}, err
		}
		fmt.Printf("e2e: make image: %s in %v\n", img.Digest, took.Round(time.Millisecond))
		return img, importImage(env, img)
	})
	// workloadImage is the pinned pod's image; the pause image (the
	// sandbox image of the suite's containerd) is built and imported with
	// it.
	workloadImage = sync.OnceValues(func() (image, error) {
		if _, err := testImage("pause", testimage.PauseName); err != nil {
			return image{}, err
		}
		return testImage("workload", testimage.WorkloadName)
	})
	// imageTool is hack/image (the tool behind `make image`), built into
	// the run's directory.
	imageTool = sync.OnceValues(func() (string, error) {
		return testimage.Tool(repoRoot, env.dir)
	})
)

// testImage builds test/e2e/images/<pkg> into the image name and imports
// it.
func testImage(pkg, name string) (image, error) {
	tool, err := imageTool()
	if err != nil {
		return image{}, err
	}
	img, err := testimage.Package(repoRoot, env.dir, tool, pkg, name)
	if err != nil {
		return image{}, err
	}
	return img, importImage(env, img)
}

// importImage imports the archive into the suite's containerd, in the
// kubelet's namespace, and names it by digest too: containerd's CRI finds an
// image by the names it has, and a pod names it by digest.
func importImage(s *suite, img image) error {
	out, err := s.containerd.ctr("images", "import", img.Archive)
	if err != nil {
		return err
	}
	name, digest, ok := testimage.ImportedAs(out)
	if !ok {
		return fmt.Errorf("ctr images import %s: no image named in its output:\n%s", img.Archive, out)
	}
	if digest != img.Digest {
		return fmt.Errorf("ctr imported %s as %s, want the index digest %s", name, digest, img.Digest)
	}
	_, err = s.containerd.ctr("images", "tag", "--force", name, img.Ref())
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
	again, took, err := testimage.Make(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	second := again.Digest
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
	inputs, err := exec.Command("make", "-s", "--no-print-directory", "-C", repoRoot, "image-inputs").Output()
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
