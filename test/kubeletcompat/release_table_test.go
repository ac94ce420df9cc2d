package kubeletcompat_test

import (
	"encoding/json"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"testing"

	"github.com/go-logr/logr"
	"github.com/google/go-cmp/cmp"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/kubernetes/pkg/kubelet/cm/cpumanager"
	memstate "k8s.io/kubernetes/pkg/kubelet/cm/memorymanager/state"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// TestReleaseTableMatchesKubelet checks hotplugd's row of the kubelet
// release under test (pkg/kubeletversion) against that release's own code:
// the release and cAdvisor it names, every feature gate (stage, default,
// lock, and how AllAlpha/AllBeta and explicit settings combine), the gates it
// leaves out, the CPU manager policy options and their levels, the eviction
// defaults and the checkpoint generation each manager writes.
func TestReleaseTableMatchesKubelet(t *testing.T) {
	rel := hotplugdRelease(t)

	t.Run("build", func(t *testing.T) {
		if got := oracle.KubeletVersion(); rel.Tested.String() != got {
			t.Errorf("%s: Tested = %s, the oracle runs %s", rel, rel.Tested, got)
		}
		if got := oracle.CAdvisorVersion(); rel.CAdvisor != got {
			t.Errorf("%s: CAdvisor = %q, the oracle is built with %q", rel, rel.CAdvisor, got)
		}
	})

	t.Run("gates", func(t *testing.T) {
		known := utilfeature.DefaultMutableFeatureGate.GetAll()
		for _, name := range hotplugdGates() {
			spec, ok := known[featuregate.Feature(name)]
			g, inRow := rel.Gates[name]
			switch {
			case !inRow && ok:
				t.Errorf("%s: gate %s missing from the row; the kubelet has it: %+v", rel, name, spec)
			case inRow && !ok:
				t.Errorf("%s: gate %s in the row; the kubelet does not know it", rel, name)
			case inRow:
				want := kubeletversion.Gate{Stage: stage(spec), Default: spec.Default, Locked: spec.LockToDefault}
				if g != want {
					t.Errorf("%s: gate %s = %+v, the kubelet's is %+v", rel, name, g, want)
				}
			}
		}
		if _, ok := known["InPlaceNodeResourceResize"]; ok != rel.InPlaceNodeResourceResize {
			t.Errorf("%s: InPlaceNodeResourceResize = %v, the kubelet knows the gate: %v", rel, rel.InPlaceNodeResourceResize, ok)
		}
	})

	t.Run("enabled", func(t *testing.T) {
		for _, name := range slices.Sorted(maps.Keys(rel.Gates)) {
			compared := 0
			for _, gates := range []map[string]bool{
				nil,
				{name: true}, {name: false},
				{kubeletversion.AllAlpha: true}, {kubeletversion.AllAlpha: false},
				{kubeletversion.AllBeta: true}, {kubeletversion.AllBeta: false},
				{kubeletversion.AllAlpha: true, name: false}, {kubeletversion.AllBeta: true, name: false},
				{kubeletversion.AllAlpha: false, name: true}, {kubeletversion.AllBeta: false, name: true},
				{kubeletversion.AllAlpha: true, kubeletversion.AllBeta: false},
			} {
				fg := utilfeature.DefaultMutableFeatureGate.DeepCopy()
				if err := fg.SetFromMap(gates); err != nil {
					continue // the kubelet refuses to start so (a locked gate, say)
				}
				compared++
				want := fg.Enabled(featuregate.Feature(name))
				if got := rel.Enabled(gates, name); got != want {
					t.Errorf("%s: Enabled(%v, %s) = %v, the kubelet's feature gate says %v", rel, gates, name, got, want)
				}
			}
			if compared == 0 {
				t.Errorf("%s: the kubelet's feature gate refuses every setting of %s", rel, name)
			}
		}
	})

	t.Run("cpu manager options", func(t *testing.T) {
		levels := map[string]map[string]bool{}
		for _, gates := range []struct {
			level       string
			alpha, beta bool
		}{
			{"GA", false, false}, {"BETA", false, true}, {"ALPHA", true, false},
		} {
			t.Run(gates.level, func(t *testing.T) {
				setKubeletGates(t, map[string]bool{
					kubeletversion.GateCPUManagerPolicyAlphaOptions: gates.alpha,
					kubeletversion.GateCPUManagerPolicyBetaOptions:  gates.beta,
				})
				avail := map[string]bool{}
				for _, opt := range hotplugdCPUOptions() {
					avail[opt] = cpumanager.CheckPolicyOptionAvailable(opt) == nil
				}
				levels[gates.level] = avail
			})
		}
		got := map[string]kubeletversion.Stage{}
		for _, opt := range hotplugdCPUOptions() {
			switch {
			case levels["GA"][opt]:
				got[opt] = kubeletversion.GA
			case levels["BETA"][opt]:
				got[opt] = kubeletversion.Beta
			case levels["ALPHA"][opt]:
				got[opt] = kubeletversion.Alpha
			}
		}
		if diff := cmp.Diff(got, rel.CPUManagerOptions); diff != "" {
			t.Errorf("%s: CPU manager options differ (-kubelet +row):\n%s", rel, diff)
		}
	})

	t.Run("eviction", func(t *testing.T) {
		if diff := cmp.Diff(eviction.DefaultEvictionHard, rel.EvictionHard); diff != "" {
			t.Errorf("%s: EvictionHard differs (-kubelet +row):\n%s", rel, diff)
		}
	})

	// The managers' checkpoints: 1.37's carry their payload in "data" whatever
	// the gates; older ones never do.
	t.Run("layouts", func(t *testing.T) {
		setKubeletGates(t, map[string]bool{gatePodLevelResourceManagers: false})
		dir := t.TempDir()
		st, err := oracle.CPUCheckpointState(dir, cpuStateFile, "static")
		if err != nil {
			t.Fatal(err)
		}
		st.SetDefaultCPUSet(cpuset.New(0, 1))
		if got, want := hasDataKey(t, filepath.Join(dir, cpuStateFile)), rel.CPUState == kubeletversion.CPUStateV4; got != want {
			t.Errorf("%s: CPUState %s, the kubelet's cpu_manager_state has data: %v", rel, rel.CPUState, got)
		}
		mst, err := memstate.NewCheckpointState(logr.Discard(), dir, memStateFile, "Static")
		if err != nil {
			t.Fatal(err)
		}
		mst.SetMachineState(memstate.NUMANodeMap{})
		if got, want := hasDataKey(t, filepath.Join(dir, memStateFile)), rel.MemState == kubeletversion.MemStateV3; got != want {
			t.Errorf("%s: MemState %s, the kubelet's memory_manager_state has data: %v", rel, rel.MemState, got)
		}
	})
}

// hotplugdGates are the feature gates hotplugd consults in any release.
func hotplugdGates() []string {
	all := map[string]bool{}
	for _, r := range kubeletversion.Releases() {
		for name := range r.Gates {
			all[name] = true
		}
	}
	return slices.Sorted(maps.Keys(all))
}

// hotplugdCPUOptions are the CPU manager options hotplugd knows in any
// release.
func hotplugdCPUOptions() []string {
	all := map[string]bool{}
	for _, r := range kubeletversion.Releases() {
		for name := range r.CPUManagerOptions {
			all[name] = true
		}
	}
	return slices.Sorted(maps.Keys(all))
}

// stage is a feature gate's maturity (featuregate.FeatureSpec.PreRelease)
// as kubeletversion names it.
func stage(spec featuregate.FeatureSpec) kubeletversion.Stage {
	if spec.PreRelease == featuregate.GA {
		return kubeletversion.GA
	}
	return kubeletversion.Stage(spec.PreRelease)
}

// hasDataKey says whether the JSON object in file p has the key "data".
func hasDataKey(t *testing.T, p string) bool {
	t.Helper()
	b, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	var keys map[string]json.RawMessage
	if err := json.Unmarshal(b, &keys); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	_, ok := keys["data"]
	return ok
}

// TestEveryReleaseHasAnOracle checks that every kubelet release hotplugd
// knows is judged by its Tested release's code: go.mod's, or a module file
// of modules/ (hack/compat-modules.sh), which hack/compat-test.sh runs.
func TestEveryReleaseHasAnOracle(t *testing.T) {
	b, err := os.ReadFile("go.mod")
	if err != nil {
		t.Fatal(err)
	}
	base := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v\S+)$`).FindSubmatch(b)
	if base == nil {
		t.Fatal("go.mod requires no k8s.io/kubernetes")
	}
	for _, r := range kubeletversion.Releases() {
		if r.Tested.String() == string(base[1]) {
			continue
		}
		if _, err := os.Stat(filepath.Join("modules", "k8s-"+r.Tested.String()+".mod")); err != nil {
			t.Errorf("%s: no oracle for %s: %v (hack/compat-modules.sh %s)", r, r.Tested, err, r.Tested)
		}
	}
}
