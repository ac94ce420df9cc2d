// Package kubeletstart predicts whether a kubelet would refuse to start,
// and says why in the kubelet's own words.
//
// It exists because hotplugd acts on a node only where the kubelet alone
// would not leave it worse: the remedy must never restart a kubelet into a
// configuration that kubelet refuses on the machine as it now is (the
// kubelet exits, its supervisor's restarts exit too, the node goes
// NotReady), and `hotplugd preflight` run by a person exits 2 only when
// the kubelet about to start would refuse to start by itself (as the
// kubelet's ExecStartPre it never blocks: the drop-in's "-"). Check is that prediction, from the kubelet's effective
// configuration (as pkg/kubeletconfig builds it from its command line,
// file and drop-ins), its --experimental-allocatable-ignore-eviction flag,
// its release (pkg/kubeletversion) and the machine (pkg/topology). It reads
// nothing on the host and writes nothing.
//
// The refusals it knows, each in the release's words and checked against
// that release's own code by test/kubeletcompat (TestKubeletStart*), in the
// order the kubelet meets them:
//
//   - feature gates (FeatureGates): a gate the release does not have
//     ("unrecognized feature gate: X"), a locked gate set against its lock,
//     and, from 1.35, a gate enabled (explicitly, or by AllAlpha/AllBeta)
//     while a gate it depends on is not: kubelet 1.37 refuses
//     AllAlpha=true alone so. Every gate of every release is in the
//     generated tables zz_generated_gates_1_<minor>.go, read off each
//     release's kubelet binary's feature gate by test/kubeletcompat
//     (TestKubeletStartGateTable -update-gates), which checks them too;
//   - the configuration's validation (Configuration), for the fields
//     hotplugd reads: healthzPort, maxPods, podsPerCore,
//     topologyManagerPolicy, topologyManagerScope, reservedSystemCPUs (its
//     syntax, and with a reserved cgroup), reservedMemory (its resource
//     types, zeros, duplicates);
//   - reservedSystemCPUs naming a CPU that is not online (ReservedCPUs,
//     any CPU manager policy);
//   - kubeReserved and systemReserved that do not parse, and evictionHard
//     statements the eviction code refuses (Reservations);
//   - the topology manager (TopologyManager): its options without their
//     gates, unknown, unparsable or below the minimum, and a policy other
//     than none on a machine with more NUMA nodes than the maximum (8, or
//     max-allowable-numa-nodes, a beta option in 1.34 and GA from 1.35);
//   - the CPU manager's configuration (CPUManager, cpumgr.NewConfig): an
//     unknown policy, options with the none policy, the static policy
//     without a cpu reservation, options the release does not know or
//     whose level's gate is off, bad values, incompatible pairs,
//     align-by-socket with the single-numa-node topology policy or on a
//     machine with more sockets than NUMA nodes, more reserved CPUs than
//     the machine has;
//   - the memory manager's configuration (MemoryManager,
//     memmgr.CheckConfig): an unknown or Windows-only policy, and for the
//     Static policy reservedMemory on a NUMA node the machine does not
//     have, not adding up to the node allocatable reservation, or reserving
//     no memory;
//   - reservations above capacity (NodeAllocatable): systemReserved +
//     kubeReserved + the hard eviction threshold (without it under the
//     flag) above the machine's cpu, memory or a hugepage size, which the
//     container manager refuses at its Start. The kubelet prints the two
//     quantities as Go structs; Refusal.Kubelet writes them as the node's
//     status would.
//
// Where the kubelet meets several problems of one kind in a Go map's order
// (gates, options, reservations, resources), Check takes them in name
// order: with two at once the kubelet may name the other one first.
//
// Not covered, so Check may return nil for a kubelet that refuses to start:
// every other field of the configuration (its validation judges dozens
// that hotplugd does not read, some only with a gate on, such as
// KubeletCrashLoopBackOffMax without crashLoopBackOff.maxContainerRestartPeriod
// under AllAlpha); the flags' own validation (--node-labels) and the gates
// of the command line alone, which the kubelet sets and checks once before
// it reads its config file (a dependency only the file satisfies); a
// --topology-manager-scope="" given explicitly (pkg/kubeletconfig cannot
// tell it from the default); prefer-closest-numa-nodes on a machine whose
// NUMA distances cannot be read; the CPU manager's reserved CPUs under
// distribute-cpus-across-numa or prefer-align-cpus-by-uncorecache, which
// hotplugd does not predict; the root file system's capacity against an
// ephemeral-storage reservation; cgroups, swap, certificates, the container
// runtime; and the state files, which pkg/preflight checks.
package kubeletstart
