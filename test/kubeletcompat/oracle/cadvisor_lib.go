//go:build kubelet_1_37

package oracle

import (
	"github.com/google/cadvisor/lib/fs"
	"github.com/google/cadvisor/lib/machine"
	cadvisorapi "github.com/google/cadvisor/lib/model"
	"github.com/google/cadvisor/lib/utils/sysfs"
	"github.com/google/cadvisor/lib/utils/sysinfo"
)

// github.com/google/cadvisor/lib, where kubelet 1.37 takes cAdvisor from
// (its machine information types moved to package model): the same names as
// cadvisor_info.go gives the older module's.

// The machine information types of cAdvisor (lib/model), which the kubelet's
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
