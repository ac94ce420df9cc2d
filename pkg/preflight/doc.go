// Package preflight checks, before the kubelet starts, the kubelet's
// resource-manager state files (cpu_manager_state and memory_manager_state
// under the kubelet's root directory) and its configuration against the
// machine as it is now, and repairs the files when that is safe: the
// CPU-upgrade incident (a node back with more CPUs whose kubelet refuses to
// start) ends with a kubelet that starts and keeps every pinned container's
// assignment.
//
// Its rule: a report that needs a person (Report.NeedsPerson, the exit
// status 2 of `hotplugd preflight`, which fails the kubelet's start) only
// where the kubelet about to start would refuse to start by itself and
// hotplugd cannot repair the files safely. test/kubeletcompat
// (TestPreflightExit2OnlyWhereKubeletRefuses) holds it against each
// kubelet release's own code.
//
// For each file the outcome is one of: absent or valid (nothing to do);
// stale and safely repairable (backed up and rewritten, or only planned with
// DryRun); needing a person (an assignment lost its CPUs or no longer fits,
// a corrupt file, a changed policy, a configuration the kubelet refuses):
// the file is left untouched and the report says why and what to do,
// naming each pod to drain as <namespace>/<name> with its UID where the
// kubelet's pod log directory names it (pkg/podnames; the state files hold
// only UIDs), and listing them in Result.Drain; or
// unknown, where hotplugd cannot judge (a kubelet version or a layout it
// does not know, a symlink or an oversized file, reserved CPUs it does not
// predict): a warning, and the kubelet judges the file itself. The kubelet's
// configuration is judged with pkg/kubeletstart; a configuration the
// kubelet refuses on this machine is a third result (File
// KubeletConfiguration) in the kubelet's words, and no file is written
// then. The kubelet's checkpoint of the pods it admitted
// (allocated_pods_state, pkg/allocated) is judged too, never written: a
// corrupt one, which the kubelet's allocation manager refuses with a panic
// at every start, needs a person (drain, delete it), and one hotplugd
// cannot read is unknown. It writes only the two state files and their backups, through
// pkg/statefile; besides them it reads only the listing of the pod log
// directory, when a plan cannot keep an assignment.
//
// OptionsFor builds the options from the kubelet's command line as
// pkg/kubeletconfig reads it, for the CLI and the daemon alike.
package preflight
