// Package statefile reads and replaces the kubelet's checkpoint files
// (cpu_manager_state, memory_manager_state) the way a careful operator
// would: reads are capped in size and refuse anything but a regular file
// (a symlink in place of the state file is an error, not followed); a write
// first keeps the current file as a timestamped backup next to it (a hard
// link, or a copy where links are not possible), then
// replaces it atomically (temporary file in the same directory, fsync,
// rename, fsync of the directory), so a crash at any point leaves the old
// file or the new one, never a mix, and the old one is always recoverable.
// The newest KeepBackups backups of a file are kept, older ones removed
// after a write (PruneBackups, which hotplugd prune also runs at an
// uninstall).
//
// It is a package of its own because both state files, and every later
// repair, share this discipline.
package statefile
