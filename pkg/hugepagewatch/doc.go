// Package hugepagewatch reports writes to the kernel's hugepage count files,
// with inotify (through github.com/fsnotify/fsnotify), so that the daemon can
// re-read the counts at once instead of at its next periodic resync.
//
// Hugepage counts have no uevent. The only signal is inotify, and inotify
// sees a write only on the file it was written through: a write to the global
// sysfs file fires IN_MODIFY on that file and not on the per-node file or on
// /proc/sys/vm/nr_hugepages, and the other way round. So the package watches
// every file through which a count can be set. Under a configurable sysfs root
// (default /sys):
//
//	kernel/mm/hugepages/hugepages-<size>kB/{nr_hugepages,nr_hugepages_mempolicy,demote}
//	devices/system/node/node<N>/hugepages/hugepages-<size>kB/{nr_hugepages,demote}
//
// and under a configurable procfs root (default /proc):
//
//	sys/vm/{nr_hugepages,nr_hugepages_mempolicy}
//
// The nr_hugepages_mempolicy files set the count on the nodes of the writer's
// memory policy, and demote splits pages of one size into pages of the next
// smaller size (two counts change); both change counts, and neither fires
// anything on an nr_hugepages file. Only the files that exist are watched:
// without hugetlb, NUMA or demotion there is less or nothing to watch.
//
// Watches are on files, never on directories: inotify on a sysfs directory
// reports no attribute writes, and sysfs sends no inotify event when a
// directory appears. NUMA nodes appear at run time (memory hot-add to a new
// node), so the caller calls [Watcher.Rescan] again: pkg/daemon does so at
// the start of every reconcile, before it reads the counts, whatever
// triggered it (a uevent, a hugepage write, an overflow, the periodic resync,
// SIGHUP). Rescan watches new files and forgets removed ones.
//
// Each watched file is also held open with O_PATH. procfs gives
// /proc/sys/vm/nr_hugepages a new inode whenever its dentry has been reclaimed
// (memory pressure, drop_caches), and an inotify watch stays on the old inode:
// without the open descriptor the watch goes silently deaf (measured on Linux
// 6.18). The descriptor keeps the dentry, and so the watched inode, in place.
// Rescan also re-watches any path whose inode changed.
//
// What it guarantees: after every write(2) through a watched file, and after
// every open of one with O_TRUNC (shell redirection), [Handler.Changed] is
// called for that file at least once, unless the inotify queue overflows,
// which is reported through [Handler.Overflow] instead. The kernel merges an
// event with an identical one still unread, so a shell write (O_TRUNC, then
// write) gives one or two calls (two about three times in four, measured on
// Linux 6.18) and a write without O_TRUNC exactly one. The call for the
// write(2) comes after the new value is in place; the one for O_TRUNC can come
// before it, so the caller must debounce on the trailing edge and re-read.
// Run never stops on an inotify error.
//
// What it cannot see: the kernel changes counts without any write (a write
// asks for N pages and gets fewer when memory is fragmented; surplus pages
// come and go with overcommit; memory hot-remove and memory failure dissolve
// free pages), and a write that happens before a new node's files are watched
// is lost. The daemon therefore re-reads everything periodically; this package
// only makes the common case fast.
package hugepagewatch
