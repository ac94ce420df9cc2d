// Package podcgroups finds the pods that still run on the node from the
// kubelet's pod cgroups, read-only.
//
// The kubelet's checkpoint of allocated pods (pkg/allocated) keeps the
// entries of pods that no longer run: terminated pods still in the API (a
// finished Job's pods) and pods deleted since its last write. A restarted
// kubelet admits neither, so counting their requests would block a restart
// that harms no pod. The kubelet makes one cgroup per running pod and
// removes it once the pod has terminated and its volumes are gone
// (cleanupOrphanedPodCgroups): the pods with a pod cgroup are the ones it
// would admit again. Listing a few cgroupfs directories needs no API
// permission and no container runtime socket.
//
// The layout is the kubelet's (pkg/kubelet/cm, the same in 1.34 to 1.37):
// with cgroupsPerQOS (the default) the pods' cgroups are under
// <cgroupRoot>/kubepods (Guaranteed pods), .../burstable and
// .../besteffort, each named pod<uid>; the systemd cgroup driver writes
// those names as slices (kubepods.slice/kubepods-burstable.slice/
// kubepods-burstable-pod<uid with "-" as "_">.slice). Like the kubelet's
// GetAllPodsFromCgroups it looks in every hierarchy (the unified one under
// cgroup v2, each controller's under v1) and counts a pod whose cgroup is
// in any. Without cgroupsPerQOS there are no pod cgroups: Running says so
// (ErrNoPodCgroups) and the caller cannot tell running pods from others.
package podcgroups
