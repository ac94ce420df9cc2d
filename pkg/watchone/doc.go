// Package watchone follows one API object by name: one list and watch,
// field-selected by metadata.name (what RBAC's resourceNames require of a
// list or watch), kept in an informer's cache, with a channel closed at
// each change. It is the shape of every source hotplugd reads from the API
// server (its own Node, its DaemonSet's pause), so each source is the
// object's meaning, not another copy of the informer plumbing.
package watchone
