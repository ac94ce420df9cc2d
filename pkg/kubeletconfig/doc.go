// Package kubeletconfig reads the kubelet's KubeletConfiguration file
// (kubelet.config.k8s.io/v1beta1, YAML or JSON) the way the kubelet does, and
// applies the kubelet's defaults to the fields hotplugd acts on: reservations
// and eviction thresholds (node allocatable), the CPU and memory manager
// policies and their reservations (state files), the health endpoint and the
// status update period (kubelet control).
//
// Discover finds the running kubelet in procfs (/proc/<pid>/cmdline), and
// builds its effective configuration as the kubelet does at start: the
// --config file, the --config-dir drop-ins, then the configuration flags of
// its command line, which win. Relative paths are resolved against
// /proc/<pid>/cwd and files are read through /proc/<pid>/root, so it works
// from a container in the host's PID namespace. FromArgs does the same for a
// command line the operator gives.
//
// What hotplugd needs to follow the kubelet comes with it: Kubelet.Files,
// the configuration files and directories to watch; Kubelet.Fingerprint,
// an identity of the kubelet's start-up behavior (command line, the content
// of every file read, the effective configuration) that survives process
// restarts; ProcessStart, which tells a new kubelet process from an old one
// under the same PID; and Kubelet.StateDir, the kubelet's root dir at a path
// hotplugd can write that outlives the kubelet process (never through
// /proc/<pid>/root), or why there is none; Kubelet.PodLogsDir, the
// kubelet's pod log directory where hotplugd reads it, to name the pods a
// drain concerns.
//
// It is a package of its own because three concerns read the same file: the
// allocatable prediction, the kubelet state repair and the kubelet restart.
// It only reads; it never writes the kubelet's configuration. What it reports
// is the configuration the kubelet started with: a file edited since then is
// not what the running kubelet uses.
package kubeletconfig
