// Package oracle computes, with the kubelet's and cAdvisor's own code, what a
// freshly started kubelet would report as node capacity and allocatable, and
// gives the tests the kubelet's CPU and memory managers to judge hotplugd's
// state files with. It exists only to test hotplugd against it: it reads the
// real machine (HostMachineInfo) or a sysfs/procfs tree (MachineInfoFromRoot) and
// the kubelet's configuration file (KubeletConfig), and writes nothing but
// the managers' state files in the directories it is given.
//
// The kubelet is the release the test binary is built with (KubeletVersion):
// v1.36.3 with go.mod, another with a module file of ../modules and its build
// tag (kubelet_1_<minor>). What differs between releases in the code called
// here is in kubelet_1_<minor>.go and, for cAdvisor's module, cadvisor_*.go.
//
// Wherever the kubelet's code is exported it is called as is (the config
// loader, eviction threshold parsing, CPU topology discovery, the capacity
// conversion and the node-status setter). The few steps that are unexported
// upstream are rewritten here in a few lines, each naming its upstream
// function, so that a change upstream is easy to follow.
package oracle

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"path/filepath"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	"k8s.io/kubernetes/cmd/kubelet/app/options"
	kubeletconfig "k8s.io/kubernetes/pkg/kubelet/apis/config"
	kubeletconfigvalidation "k8s.io/kubernetes/pkg/kubelet/apis/config/validation"
	"k8s.io/kubernetes/pkg/kubelet/cadvisor"
	"k8s.io/kubernetes/pkg/kubelet/eviction"
	evictionapi "k8s.io/kubernetes/pkg/kubelet/eviction/api"
	"k8s.io/kubernetes/pkg/kubelet/kubeletconfig/configfiles"
	"k8s.io/kubernetes/pkg/kubelet/stats/pidlimit"
	utilfs "k8s.io/kubernetes/pkg/util/filesystem"
	"k8s.io/utils/cpuset"
)

// ErrInvalidNodeAllocatable is returned (wrapped) by NodeStatus when the
// reservation of some resource exceeds its capacity. The kubelet's container
// manager refuses to start then (containerManagerImpl.validateNodeAllocatable
// fails in Start, and the kubelet exits with status 1).
var ErrInvalidNodeAllocatable = errors.New("oracle: kubelet would exit: reservation exceeds capacity")

// HostMachineInfo returns cAdvisor's machine information for this machine, read
// the way the kubelet's cAdvisor reads it at start (machine.Info on the real
// sysfs, in the host namespace). Filesystems are not reported.
func HostMachineInfo() (*MachineInfo, error) {
	info, err := machineInfo(newRealSysFs(), noFsInfo{}, true)
	if err != nil {
		return nil, fmt.Errorf("oracle: cadvisor machine.Info: %w", err)
	}
	return info, nil
}

// KubeletConfig returns the configuration a kubelet started with
// --config=path (and no other flags) would run with: the file loaded with the
// kubelet's own loader, the eviction defaults applied as cmd/kubelet/app's
// loadConfigFile applies them, and validated with the kubelet's validation
// (except its check of the host's cgroup version).
//
// An empty path is a kubelet without a config file: the kubelet's flag
// defaults (options.NewKubeletConfiguration). Note that the kubelet then has
// no hard eviction thresholds at all (EvictionHard is nil): the
// DefaultEvictionHard rule lives in loadConfigFile only.
func KubeletConfig(path string) (*kubeletconfig.KubeletConfiguration, error) {
	var kc *kubeletconfig.KubeletConfiguration
	if path == "" {
		c, err := options.NewKubeletConfiguration()
		if err != nil {
			return nil, fmt.Errorf("oracle: kubelet default configuration: %w", err)
		}
		kc = c
	} else {
		c, err := loadConfigFile(path)
		if err != nil {
			return nil, err
		}
		kc = c
	}
	// server.go validates the config (file + flags) before anything else.
	// Validation also checks the host's cgroup version (failCgroupV1); that
	// is about the host running the test, not the machine predicted, so it
	// is left out.
	vc := *kc
	vc.FailCgroupV1 = false
	if err := kubeletconfigvalidation.ValidateKubeletConfiguration(&vc, utilfeature.DefaultFeatureGate); err != nil {
		return nil, fmt.Errorf("oracle: kubelet would refuse %q: %w", path, err)
	}
	return kc, nil
}

// loadConfigFile follows cmd/kubelet/app/server.go loadConfigFile.
func loadConfigFile(path string) (*kubeletconfig.KubeletConfiguration, error) {
	abs, err := filepath.Abs(path)
	if err != nil {
		return nil, fmt.Errorf("oracle: load kubelet config %s: %w", path, err)
	}
	loader, err := configfiles.NewFsLoader(&utilfs.DefaultFs{}, abs)
	if err != nil {
		return nil, fmt.Errorf("oracle: load kubelet config %s: %w", path, err)
	}
	kc, err := loader.Load(context.Background())
	if err != nil {
		return nil, fmt.Errorf("oracle: load kubelet config %s: %w", path, err)
	}
	// EvictionHard has no API default; the kubelet fills it in after loading.
	// (Upstream assigns the global map itself; a copy is used here.)
	if kc.EvictionHard == nil {
		kc.EvictionHard = maps.Clone(eviction.DefaultEvictionHard)
	} else if kc.MergeDefaultEvictionSettings {
		for k, v := range eviction.DefaultEvictionHard {
			if _, ok := kc.EvictionHard[k]; !ok {
				kc.EvictionHard[k] = v
			}
		}
	}
	return kc, nil
}

// NodeStatus returns the cpu, memory and hugepages-<size> entries of
// node.status.capacity and node.status.allocatable that a kubelet started on a
// machine described by info, with the configuration at kubeletConfigPath (see
// KubeletConfig; "" is no config file), would report. It runs the kubelet's
// node-status setter nodestatus.MachineInfo with a container manager
// reservation computed as the kubelet computes it, with local storage capacity
// isolation off and no device plugins.
//
// It fails where the kubelet would fail to start: an invalid config, a
// reservedSystemCPUs that is not a subset of the online CPUs, an unparsable or
// negative reservation, or a reservation larger than capacity
// (ErrInvalidNodeAllocatable).
func NodeStatus(info *MachineInfo, kubeletConfigPath string) (capacity, allocatable v1.ResourceList, err error) {
	kc, err := KubeletConfig(kubeletConfigPath)
	if err != nil {
		return nil, nil, err
	}
	kubeReserved, systemReserved, thresholds, err := nodeAllocatableConfig(info, kc)
	if err != nil {
		return nil, nil, err
	}

	// NewContainerManager: cm.capacity comes from the cached MachineInfo.
	cmCapacity := cadvisor.CapacityFromMachineInfo(info)
	reservation := nodeAllocatableReservation(cmCapacity, kubeReserved, systemReserved, thresholds)
	if err := validateNodeAllocatable(cmCapacity, reservation); err != nil {
		return nil, nil, err
	}

	setter := machineInfoSetter(int(kc.MaxPods), int(kc.PodsPerCore), info, cmCapacity, reservation)
	node := &v1.Node{}
	if err := setter(context.Background(), node); err != nil {
		return nil, nil, fmt.Errorf("oracle: node status setter: %w", err)
	}
	return nodeResources(node.Status.Capacity), nodeResources(node.Status.Allocatable), nil
}

// nodeAllocatableConfig follows the part of cmd/kubelet/app/server.go run
// that builds cm.NodeAllocatableConfig: the reservedSystemCPUs override
// (getReservedCPUs), parseResourceList of both reservations and the hard
// eviction thresholds. ExperimentalNodeAllocatableIgnoreEvictionThreshold is a
// flag, false by default.
func nodeAllocatableConfig(info *MachineInfo, kc *kubeletconfig.KubeletConfiguration) (kubeReserved, systemReserved v1.ResourceList, thresholds []evictionapi.Threshold, err error) {
	kubeMap, systemMap := maps.Clone(kc.KubeReserved), maps.Clone(kc.SystemReserved)
	reserved, err := reservedCPUs(info, kc.ReservedSystemCPUs)
	if err != nil {
		return nil, nil, nil, err
	}
	if reserved.Size() > 0 {
		delete(kubeMap, string(v1.ResourceCPU))
		if systemMap == nil {
			systemMap = map[string]string{}
		}
		systemMap[string(v1.ResourceCPU)] = strconv.Itoa(reserved.Size())
	}
	if kubeReserved, err = parseResourceList(kubeMap); err != nil {
		return nil, nil, nil, fmt.Errorf("oracle: kubeReserved: %w", err)
	}
	if systemReserved, err = parseResourceList(systemMap); err != nil {
		return nil, nil, nil, fmt.Errorf("oracle: systemReserved: %w", err)
	}
	thresholds, err = eviction.ParseThresholdConfig([]string{}, kc.EvictionHard, nil, nil, nil)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("oracle: evictionHard: %w", err)
	}
	return kubeReserved, systemReserved, thresholds, nil
}

// reservedCPUs follows cmd/kubelet/app/server.go getReservedCPUs.
func reservedCPUs(info *MachineInfo, cpus string) (cpuset.CPUSet, error) {
	if cpus == "" {
		return cpuset.New(), nil
	}
	topo, err := discover(info)
	if err != nil {
		return cpuset.New(), fmt.Errorf("oracle: unable to discover CPU topology info: %w", err)
	}
	reserved, err := cpuset.Parse(cpus)
	if err != nil {
		return cpuset.New(), fmt.Errorf("oracle: unable to parse reserved-cpus list: %w", err)
	}
	if all := topo.CPUDetails.CPUs(); !reserved.IsSubsetOf(all) {
		return cpuset.New(), fmt.Errorf("oracle: reserved-cpus: %s is not a subset of online-cpus: %s", cpus, all)
	}
	return reserved, nil
}

// parseResourceList follows cmd/kubelet/app/server.go parseResourceList.
func parseResourceList(m map[string]string) (v1.ResourceList, error) {
	if len(m) == 0 {
		return nil, nil
	}
	rl := v1.ResourceList{}
	for k, v := range m {
		switch v1.ResourceName(k) {
		case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, pidlimit.PIDs:
			q, err := resource.ParseQuantity(v)
			if err != nil {
				return nil, fmt.Errorf("failed to parse quantity %q for %q resource: %w", v, k, err)
			}
			if q.Sign() == -1 {
				return nil, fmt.Errorf("resource quantity for %q cannot be negative: %v", k, v)
			}
			rl[v1.ResourceName(k)] = reservedQuantity(v1.ResourceName(k), q)
		default:
			return nil, fmt.Errorf("cannot reserve %q resource", k)
		}
	}
	return rl, nil
}

// nodeAllocatableReservation follows pkg/kubelet/cm/node_container_manager_linux.go
// (containerManagerImpl).GetNodeAllocatableReservation, with
// pkg/kubelet/cm/helpers.go hardEvictionReservation inlined.
func nodeAllocatableReservation(capacity, kubeReserved, systemReserved v1.ResourceList, thresholds []evictionapi.Threshold) v1.ResourceList {
	var evictionReservation v1.ResourceList
	if len(thresholds) > 0 {
		evictionReservation = v1.ResourceList{}
		for _, t := range thresholds {
			if t.Operator != evictionapi.OpLessThan {
				continue
			}
			switch t.Signal {
			case evictionapi.SignalMemoryAvailable:
				c := capacity[v1.ResourceMemory]
				evictionReservation[v1.ResourceMemory] = *evictionapi.GetThresholdQuantity(t.Value, &c)
			case evictionapi.SignalNodeFsAvailable:
				c := capacity[v1.ResourceEphemeralStorage]
				evictionReservation[v1.ResourceEphemeralStorage] = *evictionapi.GetThresholdQuantity(t.Value, &c)
			}
		}
	}
	result := v1.ResourceList{}
	for k := range capacity {
		value := resource.NewQuantity(0, resource.DecimalSI)
		if systemReserved != nil {
			value.Add(systemReserved[k])
		}
		if kubeReserved != nil {
			value.Add(kubeReserved[k])
		}
		if evictionReservation != nil {
			value.Add(evictionReservation[k])
		}
		if !value.IsZero() {
			result[k] = *value
		}
	}
	return result
}

// validateNodeAllocatable follows pkg/kubelet/cm/node_container_manager_linux.go
// (containerManagerImpl).validateNodeAllocatable.
func validateNodeAllocatable(capacity, reservation v1.ResourceList) error {
	var msgs []string
	for k, v := range reservation {
		value := capacity[k].DeepCopy()
		value.Sub(v)
		if value.Sign() < 0 {
			msgs = append(msgs, fmt.Sprintf("resource %q has a reservation of %v but capacity of %v", k, &v, capacity[k]))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("%w: %s", ErrInvalidNodeAllocatable, strings.Join(msgs, "; "))
	}
	return nil
}

// nodeResources keeps cpu, memory and hugepages-<size>.
func nodeResources(rl v1.ResourceList) v1.ResourceList {
	out := v1.ResourceList{}
	for k, v := range rl {
		if k == v1.ResourceCPU || k == v1.ResourceMemory || strings.HasPrefix(string(k), v1.ResourceHugePagesPrefix) {
			out[k] = v
		}
	}
	return out
}

// noFsInfo is an fs.FsInfo that knows no filesystems. machine.Info needs a
// non-nil one; node capacity does not depend on it.
type noFsInfo struct{}

var errNoFsInfo = errors.New("oracle: no filesystem information")

func (noFsInfo) GetGlobalFsInfo() ([]fsFs, error)                     { return nil, nil }
func (noFsInfo) GetFsInfoForPath(map[string]struct{}) ([]fsFs, error) { return nil, nil }
func (noFsInfo) GetDirUsage(string) (fsUsageInfo, error)              { return fsUsageInfo{}, errNoFsInfo }
func (noFsInfo) GetDeviceInfoByFsUUID(string) (*fsDeviceInfo, error) {
	return nil, errNoSuchDevice
}
func (noFsInfo) GetDirFsDevice(string) (*fsDeviceInfo, error)  { return nil, errNoFsInfo }
func (noFsInfo) GetDeviceForLabel(string) (string, error)      { return "", errNoFsInfo }
func (noFsInfo) GetLabelsForDevice(string) ([]string, error)   { return nil, errNoFsInfo }
func (noFsInfo) GetMountpointForDevice(string) (string, error) { return "", errNoFsInfo }

var _ fsInfo = noFsInfo{}
