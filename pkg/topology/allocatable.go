package topology

import (
	"fmt"
	"slices"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
)

// Allocatable returns what a freshly started kubelet with configuration cfg
// (nil: a kubelet with no config file) puts in node.status.allocatable for
// cpu, memory and hugepages:
//
//	allocatable[r] = max(0, capacity[r] - systemReserved[r] - kubeReserved[r] - hardEviction[r])
//	allocatable[memory] -= sum of hugepages-* capacity, not below 0
//
// with the kubelet's own rules: reservedSystemCPUs replaces the cpu
// reservations by its size, a percentage memory.available threshold is
// float32 arithmetic truncated to bytes, "0%" and "100%" thresholds are
// ignored. An error is a configuration the kubelet would refuse to start
// with, among them a cpu or memory reservation above capacity (the
// kubelet's container manager exits then; only hugepages can push
// allocatable memory to the clamp at zero).
func (s *Snapshot) Allocatable(cfg *kubeletv1beta1.KubeletConfiguration) (v1.ResourceList, error) {
	return s.allocatable(cfg, true)
}

// AllocatableIgnoringEviction is Allocatable for a kubelet started with
// --experimental-allocatable-ignore-eviction: no hard eviction threshold is
// held back (ReservationIgnoringEviction), and evictionHard is still checked
// as the kubelet checks it.
func (s *Snapshot) AllocatableIgnoringEviction(cfg *kubeletv1beta1.KubeletConfiguration) (v1.ResourceList, error) {
	return s.allocatable(cfg, false)
}

func (s *Snapshot) allocatable(cfg *kubeletv1beta1.KubeletConfiguration, withEviction bool) (v1.ResourceList, error) {
	if cfg == nil {
		cfg = kubeletconfig.Default()
	}
	capacity := s.Capacity()
	reservation, err := s.reservation(cfg, withEviction)
	if err != nil {
		return nil, err
	}
	if err := validateReservation(capacity, reservation); err != nil {
		return nil, err
	}
	// The same steps, in the same order, as the kubelet's node-status setter
	// (pkg/kubelet/nodestatus MachineInfo), so quantities keep its formats.
	alloc := v1.ResourceList{}
	for name, c := range capacity {
		value := c.DeepCopy()
		if r, ok := reservation[name]; ok {
			value.Sub(r)
		}
		if value.Sign() < 0 {
			value.Set(0)
		}
		alloc[name] = value
	}
	for name, c := range capacity {
		if !strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix) {
			continue
		}
		mem := alloc[v1.ResourceMemory]
		mem.Sub(c)
		if mem.Sign() < 0 {
			mem.Set(0)
		}
		alloc[v1.ResourceMemory] = mem
	}
	return alloc, nil
}

// Reservation returns what the kubelet holds back from each capacity
// resource: systemReserved + kubeReserved + the hard eviction threshold, as
// the kubelet's container manager computes it (GetNodeAllocatableReservation).
// Resources with nothing reserved are absent.
func (s *Snapshot) Reservation(cfg *kubeletv1beta1.KubeletConfiguration) (v1.ResourceList, error) {
	return s.reservation(cfg, true)
}

// ReservationIgnoringEviction is Reservation for a kubelet started with
// --experimental-allocatable-ignore-eviction: systemReserved + kubeReserved
// only. With that flag cmd/kubelet/app/server.go leaves
// NodeAllocatableConfig.HardEvictionThresholds empty, so the container
// manager's GetNodeAllocatableReservation holds no eviction threshold back,
// for node allocatable and for everything else it is handed to (the memory
// manager's reservedMemory check among them). evictionHard is still
// checked: the kubelet's eviction manager parses it (NewMainKubelet) and
// the kubelet refuses to start on a statement it rejects.
func (s *Snapshot) ReservationIgnoringEviction(cfg *kubeletv1beta1.KubeletConfiguration) (v1.ResourceList, error) {
	return s.reservation(cfg, false)
}

func (s *Snapshot) reservation(cfg *kubeletv1beta1.KubeletConfiguration, withEviction bool) (v1.ResourceList, error) {
	systemReserved := cloneMap(cfg.SystemReserved)
	kubeReserved := cloneMap(cfg.KubeReserved)

	reservedCPUs, err := s.reservedSystemCPUs(cfg.ReservedSystemCPUs)
	if err != nil {
		return nil, err
	}
	if reservedCPUs.Size() > 0 {
		// The kubelet lets reservedSystemCPUs supersede the cpu reservations.
		delete(kubeReserved, string(v1.ResourceCPU))
		if systemReserved == nil {
			systemReserved = map[string]string{}
		}
		systemReserved[string(v1.ResourceCPU)] = strconv.Itoa(reservedCPUs.Size())
	}
	system, err := parseReserved("systemReserved", systemReserved)
	if err != nil {
		return nil, err
	}
	kube, err := parseReserved("kubeReserved", kubeReserved)
	if err != nil {
		return nil, err
	}
	capacity := s.Capacity()
	eviction, err := hardEvictionReservation(cfg.EvictionHard, capacity)
	if err != nil {
		return nil, err
	}
	if !withEviction {
		eviction = nil
	}

	out := v1.ResourceList{}
	for name := range capacity {
		value := resource.NewQuantity(0, resource.DecimalSI)
		value.Add(system[name])
		value.Add(kube[name])
		value.Add(eviction[name])
		if !value.IsZero() {
			out[name] = *value
		}
	}
	return out, nil
}

// validateReservation fails, as the kubelet's validateNodeAllocatable does at
// start, when a reservation exceeds its resource's capacity.
func validateReservation(capacity, reservation v1.ResourceList) error {
	var msgs []string
	for _, name := range sortedNames(reservation) {
		r := reservation[name]
		value := capacity[name].DeepCopy()
		value.Sub(r)
		if value.Sign() < 0 {
			c := capacity[name]
			msgs = append(msgs, fmt.Sprintf("resource %q has a reservation of %s but capacity of %s", name, r.String(), c.String()))
		}
	}
	if len(msgs) > 0 {
		return fmt.Errorf("topology: the kubelet would refuse to start: %s; lower kubeReserved, systemReserved or evictionHard", strings.Join(msgs, "; "))
	}
	return nil
}

func sortedNames(l v1.ResourceList) []v1.ResourceName {
	names := make([]v1.ResourceName, 0, len(l))
	for n := range l {
		names = append(names, n)
	}
	slices.Sort(names)
	return names
}

// reservedSystemCPUs parses reservedSystemCPUs and checks, as the kubelet
// does at start, that it is a subset of the CPUs cAdvisor reports.
func (s *Snapshot) reservedSystemCPUs(list string) (cpuset.CPUSet, error) {
	if list == "" {
		return cpuset.New(), nil
	}
	reserved, err := cpuset.Parse(list)
	if err != nil {
		return cpuset.New(), fmt.Errorf("topology: reservedSystemCPUs %q: %w", list, err)
	}
	var ids []int
	for _, c := range s.OnlineCPUs() {
		ids = append(ids, c.ID)
	}
	online := cpuset.New(ids...)
	if !reserved.IsSubsetOf(online) {
		return cpuset.New(), fmt.Errorf("topology: reservedSystemCPUs %s is not a subset of the online CPUs %s: the kubelet would refuse to start", list, online)
	}
	return reserved, nil
}

// parseReserved parses a kubeReserved or systemReserved map with the
// kubelet's rules: only cpu, memory, ephemeral-storage and pid, no negatives.
func parseReserved(field string, m map[string]string) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for _, k := range sortedKeys(m) {
		switch v1.ResourceName(k) {
		case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "pid":
		default:
			return nil, fmt.Errorf("topology: %s: cannot reserve %q resource", field, k)
		}
		q, err := resource.ParseQuantity(m[k])
		if err != nil {
			return nil, fmt.Errorf("topology: %s: failed to parse quantity %q for %q resource: %w", field, m[k], k, err)
		}
		if q.Sign() < 0 {
			return nil, fmt.Errorf("topology: %s: resource quantity for %q cannot be negative: %v", field, k, m[k])
		}
		out[v1.ResourceName(k)] = q
	}
	return out, nil
}

// evictionSignals are the signals the kubelet accepts in evictionHard.
var evictionSignals = []string{
	"memory.available", "nodefs.available", "nodefs.inodesFree", "imagefs.available",
	"imagefs.inodesFree", "containerfs.available", "containerfs.inodesFree",
	"allocatableMemory.available", "pid.available",
}

// hardEvictionReservation validates every evictionHard statement as the
// kubelet does and returns the memory it holds back for memory.available.
// (nodefs.available reserves ephemeral-storage, which hotplugd does not
// report.)
func hardEvictionReservation(hard map[string]string, capacity v1.ResourceList) (v1.ResourceList, error) {
	out := v1.ResourceList{}
	for _, signal := range sortedKeys(hard) {
		val := hard[signal]
		if !slices.Contains(evictionSignals, signal) {
			return nil, fmt.Errorf("topology: evictionHard: unsupported eviction signal %s", signal)
		}
		var reserved *resource.Quantity
		if strings.HasSuffix(val, "%") {
			if val == "0%" || val == "100%" {
				continue // the kubelet ignores these
			}
			// The kubelet parses percentages as float32 and multiplies in
			// float64: 7.3% of 1000 bytes is not 73 bytes.
			f, err := strconv.ParseFloat(strings.TrimRight(val, "%"), 32)
			if err != nil {
				return nil, fmt.Errorf("topology: evictionHard %s: %q: %w", signal, val, err)
			}
			pct := float32(f) / 100
			if pct < 0 || pct > 1 {
				return nil, fmt.Errorf("topology: evictionHard %s: percentage %q must be between 0%% and 100%%", signal, val)
			}
			if signal == "memory.available" {
				mem := capacity[v1.ResourceMemory]
				reserved = resource.NewQuantity(int64(float64(mem.Value())*float64(pct)), resource.BinarySI)
			}
		} else {
			q, err := resource.ParseQuantity(val)
			if err != nil {
				return nil, fmt.Errorf("topology: evictionHard %s: %q: %w", signal, val, err)
			}
			if q.Sign() <= 0 {
				return nil, fmt.Errorf("topology: evictionHard %s: threshold must be positive: %s", signal, val)
			}
			if signal == "memory.available" {
				reserved = &q
			}
		}
		if reserved != nil {
			out[v1.ResourceMemory] = *reserved
		}
	}
	return out, nil
}

func cloneMap(m map[string]string) map[string]string {
	if m == nil {
		return nil
	}
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[k] = v
	}
	return out
}

func sortedKeys(m map[string]string) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	return keys
}
