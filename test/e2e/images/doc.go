// Package images holds the programs of the two container images the
// end-to-end cluster runs besides hotplugd's own: no registry is reachable
// from the test machines, so the pod sandbox's pause image and the pinned
// workload's image are built here from these static programs, with the same
// tool as hotplugd's image (hack/image), and imported into containerd.
//
//   - pause: the pod sandbox's process (containerd's sandbox_image).
//   - workload: a Guaranteed pod's container that only waits; it prints the
//     CPUs it may run on, so its log shows the CPU manager's pinning.
package images
