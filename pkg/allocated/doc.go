// Package allocated reads the kubelet's checkpoint of the resources it
// allocated to the pods it admitted, <kubelet root dir>/allocated_pods_state,
// and says whether those pods still fit a node's new allocatable.
//
// Why it exists: a kubelet restarted after the machine's CPUs, memory or
// hugepages shrank admits its running pods again against the new
// allocatable, oldest first, and rejects (kills) each one that no longer
// fits: OutOfcpu, OutOfmemory, OutOfhugepages-2Mi. A remedy that restarts
// the kubelet must not do that to running pods; it asks Shortfall first and
// reports the pods to drain instead. The checkpoint is the least-privilege
// source of their requests: a file the kubelet writes on the host, no API
// permission to read pods, no container runtime socket. Read only reads it,
// never writes it; podnames names its pods (it holds only UIDs).
//
// The file (pkg/kubelet/allocation and its state package, the same name,
// place and envelope in kubelet 1.34 to 1.37): JSON {"data": "<JSON
// string>", "checksum": N}, where checksum is FNV-32a of the spew dump of
// the data string (the kubelet's checkpointmanager/checksum), verified
// before data is parsed; data is {"entries": {"<pod uid>":
// {"ContainerResources": {"<container>": ResourceRequirements},
// "PodLevelResources": ResourceRequirements or null (1.35+),
// "EmptyDirVolumeLimits": {...} or null (1.37)}}}. The kubelet writes it
// only when the InPlacePodVerticalScaling gate is on (beta and on by default
// in 1.34, where it can be turned off; GA and locked on from 1.35), when it
// admits or resizes a pod whose allocation changes it; a kubelet that finds
// it corrupt at start panics ("could not restore state from checkpoint ...,
// please drain this node and delete pod resource information checkpoint
// file ... before restarting Kubelet").
//
// Limits, each a way the total Shortfall counts differs from the one the
// restarted kubelet counts (resource.PodRequests in k8s.io/component-helpers
// as the scheduler's NodeInfo computes it):
//
//   - The file holds no container types: app containers, sidecars
//     (restartable init containers) and, where the kubelet keeps them,
//     regular init containers are one map by name. The kubelet sums app
//     containers and sidecars and takes the larger of that and each regular
//     init container (plus the sidecars before it). Kubelets 1.34 and 1.35
//     keep no regular init container: Pod.Requests, the sum, is what they
//     count, unless an init container asks more than the rest (then it is
//     less). 1.36 (InPlacePodVerticalScalingInitContainers, beta, on) and
//     1.37 (GA) keep them too (Pod.InitContainersKept): the sum is then the
//     most they count and Pod.MinRequests, each resource's largest
//     container, the least; Shortfall judges by the most (a shortfall may
//     not be there: Short.Certain is false) and says Certain only where
//     the least falls short too.
//   - Pod overhead (RuntimeClass) is in the pod's spec, not in the file: not
//     counted. A node running pods with overhead may be short by it.
//   - Pod-level requests are in the file only with
//     InPlacePodLevelResourcesVerticalScaling (1.36+, on by default); they
//     replace the containers' sum for cpu, memory and hugepages, as the kubelet
//     counts them. Without that gate a pod's pod-level requests are not
//     there; the API requires them to be at least the containers' sum, so the
//     sum is then at most what the kubelet counts.
//   - A resize in progress: the kubelet counts the larger of the allocated
//     and the actuated requests; the file holds the allocated ones.
//   - Pods no longer running: the kubelet removes a deleted pod's entry only
//     in memory and rewrites the file at its next allocation, and keeps the
//     entries of terminated pods (a finished Job's pods) while they exist in
//     the API; it does not admit terminated pods again. Entries of pods that
//     do not run make the total larger than the kubelet's: the caller keeps
//     only running pods first (KeepRunning, with pkg/podcgroups' pods that
//     have a pod cgroup).
//   - Gate off (1.34 only) or no pod admitted yet: no file, or a stale one
//     the kubelet no longer updates; Read says so (ErrGateOff, ErrNotExist)
//     and the caller cannot judge.
//   - Only cpu, memory, ephemeral-storage, hugepages-* and the pod count are
//     judged; extended resources (device plugins) and DRA claims are not.
//     Other admit handlers (CPU, memory and topology managers, eviction) are
//     not modelled; a critical pod that does not fit makes the kubelet evict
//     other pods rather than reject it: some pod is killed either way.
package allocated
