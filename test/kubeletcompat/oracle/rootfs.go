package oracle

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// memTotal is cAdvisor's memoryCapacityRegexp (machine/machine.go).
var memTotal = regexp.MustCompile(`MemTotal:\s*([0-9]+) kB`)

// MachineInfoFromRoot returns the machine information the kubelet's node
// capacity depends on (NumCores, MemoryCapacity, HugePages, Topology) for a
// sysfs tree at sysRoot and a procfs tree at procRoot, such as a fixture
// captured from another machine. CPUs, NUMA nodes and hugepages are read by
// cAdvisor's own code (getNodesInfo and getHugePagesInfo, as
// machine.Info calls them) through a SysFs that maps cAdvisor's absolute
// /sys paths under sysRoot; memory is MemTotal of procRoot/meminfo parsed with
// cAdvisor's expression; NumSockets is cAdvisor's count of the "physical id"
// values of procRoot/cpuinfo (left 0 when the tree has no cpuinfo; the CPU
// manager's choices depend on it). Everything else in MachineInfo is left
// zero.
func MachineInfoFromRoot(sysRoot, procRoot string) (*MachineInfo, error) {
	sfs := rootedSysFs{sysFs: newRealSysFs(), root: filepath.Clean(sysRoot)}

	meminfo, err := os.ReadFile(filepath.Join(procRoot, "meminfo"))
	if err != nil {
		return nil, fmt.Errorf("oracle: %w", err)
	}
	m := memTotal.FindSubmatch(meminfo)
	if len(m) != 2 {
		return nil, fmt.Errorf("oracle: no MemTotal in %s", filepath.Join(procRoot, "meminfo"))
	}
	memKiB, err := strconv.ParseUint(string(m[1]), 10, 64)
	if err != nil {
		return nil, fmt.Errorf("oracle: MemTotal: %w", err)
	}
	// machine.Info's hugepagesDirectory, with its trailing slash.
	hugePages, err := getHugePagesInfo(sfs, "/sys/kernel/mm/hugepages/")
	if err != nil {
		return nil, fmt.Errorf("oracle: cadvisor hugepages: %w", err)
	}
	// machine.Info only logs a topology error and goes on with what it got.
	topo, numCores, err := getNodesInfo(sfs)
	if err != nil {
		return nil, fmt.Errorf("oracle: cadvisor topology: %w", err)
	}
	sockets := 0
	if cpuinfo, err := os.ReadFile(filepath.Join(procRoot, "cpuinfo")); err == nil {
		sockets = getSockets(cpuinfo)
	}
	return &MachineInfo{
		NumCores:       numCores,
		NumSockets:     sockets,
		MemoryCapacity: memKiB * 1024,
		HugePages:      hugePages,
		Topology:       topo,
	}, nil
}

// rootedSysFs is cAdvisor's real SysFs with every /sys path moved under
// root. Paths it returns keep the /sys form cAdvisor expects, so they can be
// handed back to it.
type rootedSysFs struct {
	sysFs
	root string
}

// in maps a cAdvisor path to the tree; concatenation keeps the trailing
// slashes cAdvisor relies on.
func (r rootedSysFs) in(p string) string { return r.root + strings.TrimPrefix(p, "/sys") }

func (r rootedSysFs) out(paths []string, err error) ([]string, error) {
	for i, p := range paths {
		paths[i] = "/sys" + strings.TrimPrefix(p, r.root)
	}
	return paths, err
}

func (r rootedSysFs) GetNodesPaths() ([]string, error) {
	// realSysFs globs its package variable nodeDir.
	return r.out(filepath.Glob(r.in("/sys/devices/system/node/node*[0-9]")))
}

func (r rootedSysFs) GetCPUsPaths(p string) ([]string, error) {
	return r.out(r.sysFs.GetCPUsPaths(r.in(p)))
}

func (r rootedSysFs) GetCoreID(p string) (string, error) { return r.sysFs.GetCoreID(r.in(p)) }

func (r rootedSysFs) GetCPUPhysicalPackageID(p string) (string, error) {
	return r.sysFs.GetCPUPhysicalPackageID(r.in(p))
}

func (r rootedSysFs) GetBookID(p string) (string, error)   { return r.sysFs.GetBookID(r.in(p)) }
func (r rootedSysFs) GetDrawerID(p string) (string, error) { return r.sysFs.GetDrawerID(r.in(p)) }
func (r rootedSysFs) GetMemInfo(p string) (string, error)  { return r.sysFs.GetMemInfo(r.in(p)) }
func (r rootedSysFs) GetDistances(p string) (string, error) {
	return r.sysFs.GetDistances(r.in(p))
}

func (r rootedSysFs) GetHugePagesInfo(p string) ([]os.FileInfo, error) {
	return r.sysFs.GetHugePagesInfo(r.in(p))
}

func (r rootedSysFs) GetHugePagesNr(p, name string) (string, error) {
	return r.sysFs.GetHugePagesNr(r.in(p), name)
}

// GetCaches reports no caches: realSysFs reads a fixed path, cache
// information does not affect capacity, and cAdvisor ignores its absence.
func (r rootedSysFs) GetCaches(int) ([]os.FileInfo, error) { return nil, nil }

// IsCPUOnline follows realSysFs.IsCPUOnline: without devices/system/cpu/online
// (no CPU hotplug) every CPU is online, otherwise the CPU must be listed.
func (r rootedSysFs) IsCPUOnline(p string) bool {
	b, err := os.ReadFile(r.in("/sys/devices/system/cpu/online"))
	if os.IsNotExist(err) {
		return true
	}
	if err != nil {
		return false
	}
	online, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return false
	}
	m := regexp.MustCompile(`cpu([0-9]+)`).FindStringSubmatch(p)
	if len(m) != 2 {
		return false
	}
	id, err := strconv.Atoi(m[1])
	return err == nil && online.Contains(id)
}
