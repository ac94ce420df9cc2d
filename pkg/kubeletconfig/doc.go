// Package kubeletconfig reads the kubelet's KubeletConfiguration file
// (kubelet.config.k8s.io/v1beta1, YAML or JSON) the way the kubelet does, and
// applies the kubelet's defaults to the fields hotplugd acts on: reservations
// and eviction thresholds (node allocatable), the CPU and memory manager
// policies and their reservations (state files), the health endpoint and the
// status update period (kubelet control).
//
// It is a package of its own because three concerns read the same file: the
// allocatable prediction, the kubelet state repair and the kubelet restart.
// It only reads; it never writes the kubelet's configuration.
package kubeletconfig
