//go:build !kubelet_1_37

package oracle

import (
	"github.com/google/cadvisor/fs"
	cadvisorapi "github.com/google/cadvisor/info/v1"
	"github.com/google/cadvisor/machine"
	"github.com/google/cadvisor/utils/sysfs"
	"github.com/google/cadvisor/utils/sysinfo"
)

// cAdvisor before github.com/google/cadvisor/lib (kubelets up to 1.36): the
// types and functions the oracle and its tests use, under names that do not
// depend on the module they come from (cadvisor_lib.go has the same for
// 1.37's github.com/google/cadvisor/lib).

// The machine information types of cAdvisor (info/v1), which the kubelet's
// capacity, CPU manager and memory manager take.
type (
	MachineInfo   = cadvisorapi.MachineInfo
	Node          = cadvisorapi.Node
	Core          = cadvisorapi.Core
	HugePagesInfo = cadvisorapi.HugePagesInfo
	Cache         = cadvisorapi.Cache
)

type (
	sysFs        = sysfs.SysFs
	fsInfo       = fs.FsInfo
	fsFs         = fs.Fs
	fsUsageInfo  = fs.UsageInfo
	fsDeviceInfo = fs.DeviceInfo
)

var (
	machineInfo      = machine.Info
	getSockets       = machine.GetSockets
	newRealSysFs     = sysfs.NewRealSysFs
	getNodesInfo     = sysinfo.GetNodesInfo
	getHugePagesInfo = sysinfo.GetHugePagesInfo
	errNoSuchDevice  = fs.ErrNoSuchDevice
)

// UniqueCPUPropertyCount is cAdvisor's sysfs.GetUniqueCPUPropertyCount: the
// number of distinct values of the topology file property (such as
// CPUPhysicalPackageID) over the online CPUs under cpuDir, given with a
// trailing slash; machine.GetSockets falls back to it when cpuinfo has no
// "physical id".
var UniqueCPUPropertyCount = sysfs.GetUniqueCPUPropertyCount

// CPUPhysicalPackageID is cAdvisor's name of a CPU's package id file.
const CPUPhysicalPackageID = sysfs.CPUPhysicalPackageID
