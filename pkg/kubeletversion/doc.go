// Package kubeletversion knows the kubelet releases hotplugd predicts for, and
// every rule hotplugd follows that differs between them, in one table
// (releases, in table.go): the layouts of cpu_manager_state and
// memory_manager_state that each release reads and writes, the feature gates
// hotplugd consults with their stage and default, the CPU manager policy
// options and the gate each needs, and the eviction defaults.
//
// A kubelet is known when its minor release is in the table and it is not a
// pre-release: any patch release of a known minor is known (patch releases
// do not change these rules). Everything else (a 1.38 alpha, a 1.33, a
// version that cannot be read) is unknown, and Lookup says so with
// ErrUnknown: callers then step aside (report capacity only, never block or
// rewrite anything), because a rule they would apply may not hold there.
//
// Each row names the release the oracle tests in test/kubeletcompat check it
// against (Release.Tested), by that release's own code.
//
// It reads nothing on the host but the kubelet binary it is asked to run
// with --version (FromBinary), and the version cache that keeps the answer
// with the binary's identity (FromBinaryCached, FromCache: preflight runs in
// the kubelet's start, which should not wait on a slow --version, and the
// daemon cannot run the kubelet's /proc/<pid>/exe without ptrace).
package kubeletversion
