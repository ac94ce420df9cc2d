//go:build e2e

package e2e

import (
	"os"
	"os/exec"
	"testing"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

// envOldestKubelet names the kubelet binary of the oldest release hotplugd
// supports (make e2e sets it: hack/kubebin.sh v1.34.4 kubelet, linked from
// the packages of that release's oracle tests).
const envOldestKubelet = "HOTPLUGD_KUBELET_OLDEST"

// release is one kubelet binary the incidents run on.
type release struct {
	version string // as the binary prints it: v1.37.2
	bin     string // "" for the suite's kubelet
}

// hotplugdArgs are the flags hotplugd needs to restart this kubelet in the
// incidents, which run no pod: --allow-readiness-reset where a restart of
// the release resets every container's readiness (1.34), which hotplugd
// otherwise withholds (pkg/kubeletversion; the withheld restart has its own
// tests).
func (r release) hotplugdArgs(t *testing.T) []string {
	t.Helper()
	v, err := kubeletversion.Parse(r.version)
	if err != nil {
		t.Fatal(err)
	}
	rel, err := kubeletversion.Lookup(v)
	if err != nil {
		t.Fatal(err)
	}
	if rel.ResetsReadinessOnRestart(nil) {
		return []string{"--allow-readiness-reset"}
	}
	return nil
}

// incidentReleases runs f for each kubelet the incidents run on, each as a
// subtest named by its version: the suite's (the current release) and the
// oldest release hotplugd supports ($HOTPLUGD_KUBELET_OLDEST), which is
// skipped, saying so, when the variable is not set.
func incidentReleases(t *testing.T, s *suite, f func(t *testing.T, r release)) {
	t.Helper()
	cur := kubeletRelease(t, s.kubeletBin)
	t.Run(cur, func(t *testing.T) { f(t, release{version: cur}) })
	bin := os.Getenv(envOldestKubelet)
	if bin == "" {
		t.Run("oldest", func(t *testing.T) {
			t.Skipf("SKIPPED: $%s is not set (make e2e sets it to the v1.34 kubelet of hack/kubebin.sh)", envOldestKubelet)
		})
		return
	}
	old := kubeletRelease(t, bin)
	v, err := kubeletversion.Parse(old)
	if err != nil {
		t.Fatal(err)
	}
	if oldest := kubeletversion.Releases()[0]; v.Minor != oldest.Minor {
		t.Fatalf("$%s is kubelet %s, not the oldest release hotplugd supports (1.%d)", envOldestKubelet, old, oldest.Minor)
	}
	t.Run(old, func(t *testing.T) { f(t, release{version: old, bin: bin}) })
}

// kubeletRelease is the version a kubelet binary prints.
func kubeletRelease(t *testing.T, bin string) string {
	t.Helper()
	out, err := exec.Command(bin, "--version").Output()
	if err != nil {
		t.Fatalf("%s --version: %v", bin, err)
	}
	v, err := kubeletversion.ParseVersionOutput(out)
	if err != nil {
		t.Fatal(err)
	}
	return v.String()
}

// scenarioOn is a results table's scenario name with the release, for
// every release but the suite's own.
func scenarioOn(name string, r release) string {
	if r.bin == "" {
		return name
	}
	return name + " (" + r.version + ")"
}
