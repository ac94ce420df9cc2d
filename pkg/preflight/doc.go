// Package preflight checks the kubelet's resource-manager state files
// (cpu_manager_state and memory_manager_state under the kubelet's root
// directory) against the machine as it is now, before the kubelet starts,
// and repairs them when that is safe: the CPU-upgrade incident (a node back
// with more CPUs whose kubelet refuses to start) ends with a kubelet that
// starts and keeps every pinned container's assignment.
//
// For each file the outcome is one of: absent or valid (nothing to do);
// stale and safely repairable (backed up and rewritten, or only planned with
// DryRun); or needing a person (an assignment lost its CPUs or no longer
// fits, an unknown format, a corrupt file, a changed policy): the file is
// left untouched and the report says why and what to do. It writes only the
// two state files and their backups, through pkg/statefile.
package preflight
