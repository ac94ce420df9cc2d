// Package memmgr reads, verifies, validates and rebuilds the kubelet's
// Static memory manager checkpoint, <kubelet root>/memory_manager_state,
// so that a kubelet whose node gained or lost memory or hugepages can start
// again without losing the memory pinned to its Guaranteed containers.
//
// It reads and writes only that file, through package statefile (reads
// capped in size and refusing symlinks; writes after a timestamped backup,
// atomically). The machine comes from a topology.Snapshot (per NUMA node:
// MemTotal of nodeN/meminfo and nodeN/hugepages/*/nr_hugepages, which is
// what cAdvisor gives the kubelet), the kubelet's settings from its
// KubeletConfiguration (memoryManagerPolicy, reservedMemory, the node
// allocatable reservation, the PodLevelResourceManagers feature gate).
//
// Every rule that differs between kubelet releases (the layouts each reads
// and writes, how it verifies them, the words of its refusals) follows
// Config.Release, from package kubeletversion: kubelets 1.34 and 1.35 read
// and write FormatV1; 1.36 FormatV1, or with PodLevelResourceManagers
// FormatV2; 1.37 writes FormatV3 (data/dataChecksum beside the V1 fields)
// and reads every layout, migrating the older ones in memory without
// rewriting the file.
//
// What it guarantees, checked in test/kubeletcompat against the code of
// every kubelet release hotplugd knows (1.34.4, 1.35.4, 1.36.3 and 1.37.2):
//
//   - Parse decodes a file as every known kubelet's checkpoint loader does
//     and records each one's verdict: the same checksum rules (FNV-32a over
//     the k8s.io/utils/dump ForHash dump of the checkpoint under the
//     kubelet's type names; checksum 0 accepted from 1.36 on; for FormatV3
//     the dataChecksum over data only, and no fall-back from a file with
//     data that does not load), the same decoding errors.
//   - Marshal writes the bytes the kubelet writes for the same state, in
//     the layout of the state's Format.
//   - Validate returns the verdict of the configured kubelet's memory
//     manager start (configuration, checkpoint restore, the Static policy's
//     comparison of the file's machineState with the one it rebuilds from
//     the machine and the assignments), with the kubelet's message and which
//     NUMA node and resource differ.
//   - PlanRebuild keeps every assignment that still fits and rebuilds the
//     machine state the way the kubelet accounts it, so the kubelet accepts
//     the result. It never drops an assignment silently: one that no longer
//     fits is NeedsDrain and the plan is not applied unless the operator
//     allows dropping it. When shrunk memory cannot hold every assignment,
//     assignments are kept in pod UID and container name order and the
//     first that does not fit needs the drain.
package memmgr
