package kubeletcompat_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"

	v1 "k8s.io/api/core/v1"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/component-base/featuregate"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/topology"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// quantities renders a resource list as name -> quantity string, the form in
// which node.status is compared: a prediction must match the kubelet's
// formatting too, not only its value.
func quantities(rl v1.ResourceList) map[string]string {
	if rl == nil {
		return nil
	}
	out := make(map[string]string, len(rl))
	for k, v := range rl {
		out[string(k)] = v.String()
	}
	return out
}

// writeFile writes content under root, creating parent directories.
func writeFile(t *testing.T, root, rel, content string) {
	t.Helper()
	p := filepath.Join(root, rel)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

// treeMachine describes a machine to lay out as a sysfs/procfs tree.
type treeMachine struct {
	// nodes[i] lists the CPUs linked under NUMA node i.
	nodes [][]int
	// offline CPUs have online=0 and no topology directory, as on a real kernel.
	offline []int
	// threadsPerCore CPUs with consecutive ids share a core; cores are
	// numbered per package.
	threadsPerCore int
	// nodeMemKiB is each node's MemTotal; memTotalKiB /proc/meminfo's.
	nodeMemKiB  []uint64
	memTotalKiB uint64
	// hugePages is the global count per page size in KiB; the pages are
	// spread evenly over the nodes.
	hugePages map[uint64]uint64
}

// write lays the machine out under root as root/sys and root/proc with the
// files the kernel has and that hotplugd and cAdvisor read.
func (m treeMachine) write(t *testing.T, root string) {
	t.Helper()
	var all []int
	for _, cpus := range m.nodes {
		all = append(all, cpus...)
	}
	sort.Ints(all)
	allSet := cpuset.New(all...)
	online := allSet.Difference(cpuset.New(m.offline...))
	cpuDir := "sys/devices/system/cpu"
	writeFile(t, root, cpuDir+"/possible", allSet.String()+"\n")
	writeFile(t, root, cpuDir+"/present", allSet.String()+"\n")
	writeFile(t, root, cpuDir+"/online", online.String()+"\n")
	for node, cpus := range m.nodes {
		for i, id := range cpus {
			dir := fmt.Sprintf("%s/cpu%d", cpuDir, id)
			if id != 0 {
				state := "1"
				if !online.Contains(id) {
					state = "0"
				}
				writeFile(t, root, dir+"/online", state+"\n")
			}
			if online.Contains(id) {
				writeFile(t, root, dir+"/topology/physical_package_id", fmt.Sprintf("%d\n", node))
				writeFile(t, root, dir+"/topology/die_id", "0\n")
				writeFile(t, root, dir+"/topology/core_id", fmt.Sprintf("%d\n", i/m.threadsPerCore))
			}
			link := filepath.Join(root, fmt.Sprintf("sys/devices/system/node/node%d/cpu%d", node, id))
			if err := os.MkdirAll(filepath.Dir(link), 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(fmt.Sprintf("../../cpu/cpu%d", id), link); err != nil {
				t.Fatal(err)
			}
		}
		nodeDir := fmt.Sprintf("sys/devices/system/node/node%d", node)
		writeFile(t, root, nodeDir+"/meminfo", fmt.Sprintf("Node %d MemTotal:       %d kB\nNode %d MemFree:        %d kB\n", node, m.nodeMemKiB[node], node, m.nodeMemKiB[node]/2))
		writeFile(t, root, nodeDir+"/distance", strings.Repeat("10 ", len(m.nodes)-1)+"10\n")
		for size, n := range m.hugePages {
			writeFile(t, root, fmt.Sprintf("%s/hugepages/hugepages-%dkB/nr_hugepages", nodeDir, size), fmt.Sprintf("%d\n", n/uint64(len(m.nodes))))
		}
	}
	writeFile(t, root, "sys/devices/system/node/online", fmt.Sprintf("0-%d\n", len(m.nodes)-1))
	writeFile(t, root, "sys/devices/system/node/possible", fmt.Sprintf("0-%d\n", len(m.nodes)-1))
	for size, n := range m.hugePages {
		writeFile(t, root, fmt.Sprintf("sys/kernel/mm/hugepages/hugepages-%dkB/nr_hugepages", size), fmt.Sprintf("%d\n", n))
	}
	meminfo := fmt.Sprintf("MemTotal:       %d kB\nMemFree:        %d kB\n", m.memTotalKiB, m.memTotalKiB/2)
	if _, ok := m.hugePages[2048]; ok {
		meminfo += fmt.Sprintf("HugePages_Total:   %d\nHugepagesize:       2048 kB\n", m.hugePages[2048])
		writeFile(t, root, "proc/sys/vm/nr_hugepages", fmt.Sprintf("%d\n", m.hugePages[2048]))
	}
	writeFile(t, root, "proc/meminfo", meminfo)
}

// memoryBlock matches the entries of sysfs memory blocks (memoryN), which
// neither cAdvisor nor the kubelet's capacity reads; large fixtures have
// thousands of them.
var memoryBlock = regexp.MustCompile(`^sys/devices/system/memory/memory[0-9]+(/|$)`)

// extractArchive unpacks a .tar.gz fixture into dir, leaving out memory
// blocks.
func extractArchive(archive, dir string) error {
	return fixturegen.ExtractFunc(archive, dir, func(name string) bool { return !memoryBlock.MatchString(name) })
}

// readTree writes m as a sysfs/procfs tree and reads it with cAdvisor's code
// (the kubelet's machine info) and with hotplugd's reconcile snapshot.
func readTree(t *testing.T, m fixturegen.Machine) (*oracle.MachineInfo, *topology.Snapshot) {
	t.Helper()
	machineTrees.Lock()
	defer machineTrees.Unlock()
	root := machineTrees.dir(t, m)
	sys, proc := filepath.Join(root, "sys"), filepath.Join(root, "proc")
	info, err := oracle.MachineInfoFromRoot(sys, proc)
	if err != nil {
		t.Fatal(err)
	}
	snap, err := topology.NewFS(sys, proc).CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	return info, snap
}

// machineTrees holds the file trees of the machines readTree read last,
// each written once and read afresh by every case that needs it. Writing
// the trees (thousands of files for a machine with many memory blocks) was
// half of the oracle tests' CPU time, for the same few machines case after
// case (a profile of a release's run: 46 of 93 s in fixturegen's WriteDir).
// Reading stays per case: the kubelet's and hotplugd's readers see a tree
// as they would see sysfs. The lock covers a tree's write and its read, so
// no case reads a tree another evicts. TestMain removes them.
var machineTrees = &treeCache{max: 32}

type treeCache struct {
	sync.Mutex
	max   int
	root  string
	n     int
	dirs  map[string]string
	order []string // keys, oldest first
}

// dir returns the directory holding m's tree, writing it if needed; the
// caller holds the lock until it has read the tree.
func (c *treeCache) dir(t *testing.T, m fixturegen.Machine) string {
	t.Helper()
	b, err := json.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	key := string(b)
	if d, ok := c.dirs[key]; ok {
		return d
	}
	if c.root == "" {
		if c.root, err = os.MkdirTemp("", "kubeletcompat-machines-"); err != nil {
			t.Fatal(err)
		}
		c.dirs = map[string]string{}
	}
	if len(c.order) >= c.max {
		old := c.order[0]
		c.order = c.order[1:]
		if err := os.RemoveAll(c.dirs[old]); err != nil {
			t.Fatal(err)
		}
		delete(c.dirs, old)
	}
	c.n++
	d := filepath.Join(c.root, strconv.Itoa(c.n))
	if err := m.WriteDir(d); err != nil {
		os.RemoveAll(d)
		t.Fatal(err)
	}
	c.dirs[key] = d
	c.order = append(c.order, key)
	return d
}

// removeAll removes every tree; the cache starts again empty.
func (c *treeCache) removeAll() error {
	c.Lock()
	defer c.Unlock()
	root := c.root
	c.root, c.dirs, c.order = "", nil, nil
	if root == "" {
		return nil
	}
	return os.RemoveAll(root)
}

// gatePodLevelResourceManagers is the feature gate of pod-level CPU and
// memory assignments (1.36 on).
const gatePodLevelResourceManagers = "PodLevelResourceManagers"

// setKubeletGates sets the kubelet's feature gates for the rest of the test.
// A gate the kubelet release under test does not have is left out when off
// (that is how the release runs) and skips the test when on: that kubelet
// refuses to start with it.
func setKubeletGates(t *testing.T, gates map[string]bool) {
	t.Helper()
	known := map[string]bool{}
	for name, on := range gates {
		switch {
		case oracle.KnownGate(name):
			known[name] = on
		case on:
			t.Skipf("kubelet %s has no feature gate %s", oracle.KubeletVersion(), name)
		}
	}
	oracle.SetFeatureGates(t, known)
}

// kubeletGateEnabled says whether the feature gate name is on in the kubelet
// under test; a gate it does not have is off.
func kubeletGateEnabled(name string) bool {
	return oracle.KnownGate(name) && utilfeature.DefaultFeatureGate.Enabled(featuregate.Feature(name))
}

// hotplugdRelease is hotplugd's row for the kubelet release under test (its
// kubeletversion table), which hotplugd is given as the kubelet's version.
func hotplugdRelease(t testing.TB) *kubeletversion.Release {
	t.Helper()
	v, err := kubeletversion.Parse(oracle.KubeletVersion())
	if err != nil {
		t.Fatalf("the oracle's kubelet: %v", err)
	}
	r, err := kubeletversion.Lookup(v)
	if err != nil {
		t.Fatalf("hotplugd does not know the oracle's kubelet: %v", err)
	}
	return r
}
