package kubeletstart

import (
	"errors"
	"fmt"
	"maps"
	"strconv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/memmgr"
)

// machineRefusals are the refusals of the kubelet's start after its
// configuration was validated, in its order: cmd/kubelet/app run() (the
// reserved CPUs, the reservations, the hard eviction thresholds, the
// topology manager's options gate), NewContainerManager (the topology, CPU
// and memory managers), NewMainKubelet (the hard eviction thresholds again,
// under --experimental-allocatable-ignore-eviction the first time), and the
// container manager's Start (node allocatable; the state files come before
// it and are pkg/preflight's).
func machineRefusals(in Input, kc *kubeletv1beta1.KubeletConfiguration, fg *featureGates) []*Refusal {
	var rs []*Refusal
	add := func(c Component, msg string) { rs = append(rs, &Refusal{Component: c, Kubelet: msg}) }
	snap := in.Snapshot

	// getReservedCPUs (reservedSystemCPUs parses: validate checked it).
	reservedCPUs := 0
	reservationsParse := true
	if kc.ReservedSystemCPUs != "" {
		reserved, _ := cpuset.Parse(kc.ReservedSystemCPUs)
		if online := cpumgr.KubeletCPUs(snap); !reserved.IsSubsetOf(online) {
			add(ReservedCPUs, fmt.Sprintf("reserved-cpus: %s is not a subset of online-cpus: %s", kc.ReservedSystemCPUs, online.String()))
			reservationsParse = false
		}
		reservedCPUs = reserved.Size()
	}
	if reservationsParse {
		if msg := parseReservations(kc, reservedCPUs); msg != "" {
			add(Reservations, msg)
			reservationsParse = false
		}
	}
	evictionMsg := parseEviction(kc.EvictionHard)
	if evictionMsg != "" && !in.AllocatableIgnoresEviction {
		add(Reservations, evictionMsg)
		reservationsParse = false
	}

	rs = append(rs, topologyRefusals(in, kc, fg)...)

	if !reservationsParse {
		return rs
	}
	// The container manager's reservation (GetNodeAllocatableReservation):
	// without the hard eviction thresholds under the flag.
	withoutEviction := *kc
	withoutEviction.EvictionHard = nil
	reservationConfig := kc
	if in.AllocatableIgnoresEviction {
		reservationConfig = &withoutEviction
	}
	reservation, err := snap.Reservation(reservationConfig)
	if err != nil {
		// The checks above are the kubelet's; topology's are meant to
		// agree with them. Should they not, say so in hotplugd's words.
		rs = append(rs, &Refusal{Component: Reservations, Kubelet: strings.TrimPrefix(err.Error(), "topology: "), Paraphrase: true})
		return rs
	}

	if _, err := cpumgr.NewConfig(reservationConfig, snap, "", in.Release); err != nil {
		var ce *cpumgr.ConfigError
		if errors.As(err, &ce) {
			add(CPUManager, ce.Kubelet)
		}
		// ErrCannotPredict: the kubelet may start; nothing to say.
	}
	if cfg, err := memmgr.NewConfig(reservationConfig, snap, "", in.Release); err == nil {
		var ke *memmgr.KubeletError
		if errors.As(memmgr.CheckConfig(snap, cfg), &ke) {
			add(MemoryManager, ke.Kubelet)
		}
	}
	if evictionMsg != "" {
		// NewMainKubelet's eviction manager, whatever the flag.
		add(Reservations, evictionMsg)
		return rs
	}
	if msg := nodeAllocatable(snap.Capacity(), reservation); msg != "" {
		add(NodeAllocatable, msg)
	}
	return rs
}

// parseReservations is run()'s parseResourceList of kubeReserved, then
// systemReserved, after reservedSystemCPUs replaced their cpu (reserved
// CPUs > 0), with the kubelet's words; a map's entries in name order.
func parseReservations(kc *kubeletv1beta1.KubeletConfiguration, reservedCPUs int) string {
	kube, system := maps.Clone(kc.KubeReserved), maps.Clone(kc.SystemReserved)
	if reservedCPUs > 0 {
		delete(kube, string(v1.ResourceCPU))
		if system == nil {
			system = map[string]string{}
		}
		system[string(v1.ResourceCPU)] = strconv.Itoa(reservedCPUs)
	}
	for _, r := range []struct {
		flag string
		m    map[string]string
	}{{"--kube-reserved", kube}, {"--system-reserved", system}} {
		for _, k := range sortedKeys(r.m) {
			v := r.m[k]
			var msg string
			switch v1.ResourceName(k) {
			case v1.ResourceCPU, v1.ResourceMemory, v1.ResourceEphemeralStorage, "pid":
				q, err := resource.ParseQuantity(v)
				switch {
				case err != nil:
					msg = fmt.Sprintf("failed to parse quantity %q for %q resource: %v", v, k, err)
				case q.Sign() == -1:
					msg = fmt.Sprintf("resource quantity for %q cannot be negative: %v", k, v)
				}
			default:
				msg = fmt.Sprintf("cannot reserve %q resource", k)
			}
			if msg != "" {
				return r.flag + " value failed to parse: " + msg
			}
		}
	}
	return ""
}

// evictionSignals are the signals the kubelet's eviction code knows on
// Linux (pkg/kubelet/eviction signalToResource), the same in every release
// hotplugd knows.
var evictionSignals = map[string]bool{
	"memory.available": true, "allocatableMemory.available": true,
	"nodefs.available": true, "nodefs.inodesFree": true,
	"imagefs.available": true, "imagefs.inodesFree": true,
	"containerfs.available": true, "containerfs.inodesFree": true,
	"pid.available": true,
}

// parseEviction is eviction.ParseThresholdConfig of evictionHard alone
// (parseThresholdStatement for each statement), with its words; the
// statements in signal order, where the kubelet takes its map's.
func parseEviction(hard map[string]string) string {
	for _, signal := range sortedKeys(hard) {
		val := hard[signal]
		if !evictionSignals[signal] {
			return "unsupported eviction signal " + signal
		}
		if strings.HasSuffix(val, "%") {
			if val == "0%" || val == "100%" {
				continue
			}
			f, err := strconv.ParseFloat(strings.TrimRight(val, "%"), 32)
			if err != nil {
				return err.Error()
			}
			switch p := float32(f) / 100; {
			case p < 0:
				return fmt.Sprintf("eviction percentage threshold %v must be >= 0%%: %s", signal, val)
			case p > 1:
				return fmt.Sprintf("eviction percentage threshold %v must be <= 100%%: %s", signal, val)
			}
			continue
		}
		q, err := resource.ParseQuantity(val)
		if err != nil {
			return err.Error()
		}
		if q.Sign() <= 0 {
			return fmt.Sprintf("eviction threshold %v must be positive: %s", signal, q.String())
		}
	}
	return ""
}

// nodeAllocatable is containerManagerImpl.validateNodeAllocatable: every
// resource whose reservation exceeds its capacity. Two differences in the
// words: the resources come in name order where the kubelet takes its
// map's, and the quantities are written as the node's status writes them
// where the kubelet prints Go's struct of each (it formats a
// resource.Quantity value with %v; only its pointer has String).
func nodeAllocatable(capacity, reservation v1.ResourceList) string {
	var msgs []string
	for _, name := range sortedKeys(reservation) {
		r := reservation[name]
		c := capacity[name]
		left := c.DeepCopy()
		left.Sub(r)
		if left.Sign() < 0 {
			msgs = append(msgs, fmt.Sprintf("Resource %q has a reservation of %s but capacity of %s. Expected capacity >= reservation.", name, r.String(), c.String()))
		}
	}
	if len(msgs) == 0 {
		return ""
	}
	return "invalid Node Allocatable configuration. " + strings.Join(msgs, " ")
}
