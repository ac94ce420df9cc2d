// Package cpumgr verifies and rebuilds the kubelet's CPU manager checkpoint,
// <kubelet root>/cpu_manager_state, so that a kubelet with the static CPU
// manager policy starts after CPUs were added or removed, without losing the
// CPUs pinned to running containers.
//
// It reads the file (ReadFile: through statefile, so capped in size and never
// through a symlink) and writes it (Apply: a timestamped backup next to it,
// then an atomic, fsynced replacement). Nothing else on the host is touched;
// the machine is described by a topology.Snapshot and the kubelet by its
// release (package kubeletversion) and configuration (NewConfig).
//
// Every rule that differs between kubelet releases follows Config.Release:
// kubelets 1.34 and 1.35 read V1, else V2, and write V2; 1.36 reads V2, else
// V1, and writes V2, or with the PodLevelResourceManagers feature gate reads
// V3, else V2, else V1, and writes V3; 1.37 reads V4 (a file whose data does
// not load or verify is refused, not read as V3), else V3, else V2 (never V1),
// and writes V4 whatever its gates.
//
// Guarantees, each checked in test/kubeletcompat against the code of every
// kubelet release hotplugd knows (1.34.4, 1.35.4, 1.36.3 and 1.37.2):
//
//   - Parse reads V1 checkpoints without assignments, and V2, V3 and V4
//     ones, exactly as each release's loader does under either setting of
//     the gate: the same fallbacks between formats and the same checksums
//     (FNV-32a over the spew dump of the checkpoint struct, or for V4 of its
//     data string, made with k8s.io/utils/dump on structs declared with the
//     kubelet's package, type and field names in internal/state,
//     internal/state134 and internal/state137), so a file is accepted or
//     refused as each kubelet accepts or refuses it, with its words. V1 files
//     with assignments, which only the kubelet can map to pods, are refused
//     as such (FormatError).
//   - Validate gives the configured kubelet's CPU manager start-up verdict
//     for a state on a machine, with the kubelet's message.
//   - PlanRebuild keeps every assignment whose CPUs are all still online,
//     puts new CPUs in the default set, keeps the reserved CPUs where the
//     policy wants them, and never drops an assignment that lost a CPU
//     unless the operator allows it (Config.AllowDrop) after draining the
//     pods it names. A state the kubelet already accepts is left alone; a
//     rebuilt one is in the layout the configured kubelet writes.
//   - Marshal writes the bytes the kubelet writes for the same state in V2,
//     V3 or V4 (its key order, canonical CPU lists, omitted empty maps,
//     checksums), so the kubelet loads the file and would not write it
//     differently.
//   - ReservedCPUs predicts the CPUs the kubelet reserves when only
//     kubeReserved/systemReserved cpu is set, with the static policy's
//     topology-aware order, except under the distribute-cpus-across-numa and
//     prefer-align-cpus-by-uncorecache options (ErrCannotPredict).
package cpumgr
