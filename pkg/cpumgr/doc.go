// Package cpumgr verifies and rebuilds the kubelet's CPU manager checkpoint,
// <kubelet root>/cpu_manager_state, so that a kubelet with the static CPU
// manager policy starts after CPUs were added or removed, without losing the
// CPUs pinned to running containers.
//
// It reads the file (ReadFile: through statefile, so capped in size and never
// through a symlink) and writes it (Apply: a timestamped backup next to it,
// then an atomic, fsynced replacement). Nothing else on the host is touched;
// the machine is described by a topology.Snapshot and the kubelet by its
// configuration (NewConfig).
//
// Guarantees, each checked against kubelet v1.36.3's own code in
// test/kubeletcompat:
//
//   - Parse reads V2 and V3 checkpoints, and V1 ones without assignments,
//     exactly as the kubelet does: the same fallbacks between formats and the
//     same checksum (FNV-32a over the spew dump of the checkpoint struct, made
//     with k8s.io/utils/dump on structs declared with the kubelet's package,
//     type and field names in internal/state), so a file is accepted or
//     refused as the kubelet accepts or refuses it, with its words. V4 files
//     and V1 files with assignments are refused as such (FormatError).
//   - Validate gives the CPU manager's start-up verdict for a state on a
//     machine, with the kubelet's message.
//   - PlanRebuild keeps every assignment whose CPUs are all still online,
//     puts new CPUs in the default set, keeps the reserved CPUs where the
//     policy wants them, and never drops an assignment that lost a CPU
//     unless the operator allows it (Config.AllowDrop) after draining the
//     pods it names. A state the kubelet already accepts is left alone.
//   - Marshal writes the bytes the kubelet writes for the same state (its key
//     order, canonical CPU lists, omitted empty maps, checksum), so the
//     kubelet loads the file and would not write it differently.
//   - ReservedCPUs predicts the CPUs the kubelet reserves when only
//     kubeReserved/systemReserved cpu is set, with the static policy's
//     topology-aware order.
package cpumgr
