package kubeletcompat_test

import (
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/kubernetes/pkg/kubelet/cm"

	"github.com/hotplugd/hotplugd/pkg/podcgroups"
)

// TestPodCgroupsMatchKubelet lays out pod cgroups as the kubelet names
// them (pkg/kubelet/cm: the QoS cgroups under cgroupRoot/kubepods, pod<uid>,
// its cgroupfs and systemd drivers' names) for generated pods, under cgroup
// v2 and v1, and checks podcgroups.Running finds exactly the pods given a
// cgroup.
func TestPodCgroupsMatchKubelet(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	cases := 0
	for _, root := range []string{"/", "", "/k8s", "/a/b"} {
		for _, driver := range []string{podcgroups.DriverCgroupfs, podcgroups.DriverSystemd} {
			for _, v1hier := range []bool{false, true} {
				for range 25 {
					fsRoot := t.TempDir()
					mounts := []string{fsRoot}
					if v1hier {
						mounts = []string{filepath.Join(fsRoot, "memory"), filepath.Join(fsRoot, "cpu,cpuacct")}
					} else if err := os.WriteFile(filepath.Join(fsRoot, "cgroup.controllers"), []byte("cpu memory\n"), 0o644); err != nil {
						t.Fatal(err)
					}
					name := func(c cm.CgroupName) string {
						if driver == podcgroups.DriverSystemd {
							return c.ToSystemd()
						}
						return c.ToCgroupfs()
					}
					// The kubelet's QoS cgroups (qos_container_manager_linux.go).
					kubepods := cm.NewCgroupName(cm.ParseCgroupfsToCgroupName(root), "kubepods")
					qos := map[v1.PodQOSClass]cm.CgroupName{
						v1.PodQOSGuaranteed: kubepods,
						v1.PodQOSBurstable:  cm.NewCgroupName(kubepods, strings.ToLower(string(v1.PodQOSBurstable))),
						v1.PodQOSBestEffort: cm.NewCgroupName(kubepods, strings.ToLower(string(v1.PodQOSBestEffort))),
					}
					for _, m := range mounts {
						for _, q := range qos {
							if err := os.MkdirAll(filepath.Join(m, name(q)), 0o755); err != nil {
								t.Fatal(err)
							}
						}
					}
					want := map[string]bool{}
					classes := []v1.PodQOSClass{v1.PodQOSGuaranteed, v1.PodQOSBurstable, v1.PodQOSBestEffort}
					for i := range r.IntN(6) {
						uid := types.UID(fmt.Sprintf("%08x-%04x-4%03x-8000-%012x", r.Uint32(), i, r.IntN(4096), r.Uint64()&0xffffffffffff))
						if r.IntN(4) == 0 {
							continue // a pod that no longer runs: no cgroup
						}
						pod := cm.NewCgroupName(qos[classes[r.IntN(3)]], cm.GetPodCgroupNameSuffix(uid))
						// Under v1 in one hierarchy or both.
						for j, m := range mounts {
							if j > 0 && r.IntN(2) == 0 {
								continue
							}
							if err := os.MkdirAll(filepath.Join(m, name(pod), "container"), 0o755); err != nil {
								t.Fatal(err)
							}
						}
						want[string(uid)] = true
					}
					got, err := podcgroups.Running(fsRoot, podcgroups.Config{CgroupRoot: root, CgroupDriver: driver, CgroupsPerQOS: true})
					if err != nil {
						t.Fatalf("root %q %s v1 %v: %v", root, driver, v1hier, err)
					}
					if diff := cmp.Diff(want, got); diff != "" {
						t.Fatalf("root %q %s v1 %v: unexpected pods (-want +got):\n%s", root, driver, v1hier, diff)
					}
					cases++
				}
			}
		}
	}
	t.Logf("casecount: pod cgroups: %d layouts (cgroupRoot x driver x cgroup v1/v2), all agree", cases)
}
