// Package podnames names pods by UID from the kubelet's pod log directory.
//
// The kubelet's resource-manager state files (cpu_manager_state,
// memory_manager_state) hold only pod UIDs, and an operator told to drain
// a pod needs its namespace and name. hotplugd has no API permission to
// read pods, and needs none: the kubelet writes each pod's logs under
// <podLogsDir>/<namespace>_<name>_<uid>/ (kuberuntime's
// BuildPodLogsDirectory, the same layout in kubelet 1.34 to 1.37;
// podLogsDir is a KubeletConfiguration field, /var/log/pods by default).
// A namespace is a DNS label and a pod name a DNS subdomain, so neither
// holds an "_": the first "_" ends the namespace and the last begins the
// UID, exactly.
//
// On the host it only lists that one directory (no file in it is opened),
// and only when asked: when a drain is reported. A name it cannot find
// (no such directory, no permission, a pod without a log directory yet, a
// layout it does not know) is left out, never an error: the caller names
// that pod by its UID alone.
package podnames
