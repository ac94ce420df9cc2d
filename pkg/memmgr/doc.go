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
// What it guarantees, checked against kubelet v1.36.3's own code in
// test/kubeletcompat:
//
//   - Parse accepts exactly the files the kubelet's checkpoint loader
//     accepts, with the same checksum rules (FNV-32a over the
//     k8s.io/utils/dump ForHash dump of the checkpoint with checksum 0,
//     under the kubelet's type names; checksum 0 accepted), in the layouts
//     kubelet 1.36 writes: FormatV1 (the default) and FormatV2 (podEntries,
//     PodLevelResourceManagers). Kubelet 1.37's data/dataChecksum layout is
//     refused, naming it. Errors carry the kubelet's own message.
//   - Marshal writes the bytes the kubelet writes for the same state.
//   - Validate returns the verdict of the kubelet's memory manager start
//     (configuration, checkpoint restore, the Static policy's comparison of
//     the file's machineState with the one it rebuilds from the machine and
//     the assignments), with the kubelet's message and which NUMA node and
//     resource differ.
//   - PlanRebuild keeps every assignment that still fits and rebuilds the
//     machine state the way the kubelet accounts it, so the kubelet accepts
//     the result. It never drops an assignment silently: one that no longer
//     fits is NeedsDrain and the plan is not applied unless the operator
//     allows dropping it. When shrunk memory cannot hold every assignment,
//     assignments are kept in pod UID and container name order and the
//     first that does not fit needs the drain.
package memmgr
