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
// node), so the caller calls [Watcher.Rescan] on every node uevent and on
// every periodic resync; Rescan watches new files and forgets removed ones.
//
// Each watched file is also held open with O_PATH. procfs gives
// /proc/sys/vm/nr_hugepages a new inode whenever its dentry has been reclaimed
// (memory pressure, drop_caches), and an inotify watch stays on the old inode:
// without the open descriptor the watch goes silently deaf (measured on Linux
// 6.18). The descriptor keeps the dentry, and so the watched inode, in place.
// Rescan also re-watches any path whose inode changed.
//
// What it guarantees: every write(2) through a watched file, and every open of
// one with O_TRUNC (shell redirection), produces at least one
// [Handler.Changed] for that file, unless the inotify queue overflows, which
// is reported through [Handler.Overflow]. Consecutive identical events that
// the reader has not yet taken are merged by the kernel, so one shell write
// gives one or two calls. The last call of a write comes after its new value
// is in place; an earlier one (from O_TRUNC) can come before, so the caller
// must debounce on the trailing edge and re-read.
//
// What it cannot see: the kernel changes counts without any write (a write
// asks for N pages and gets fewer when memory is fragmented; surplus pages
// come and go with overcommit; memory hot-remove and memory failure dissolve
// free pages), and a write that happens before a new node's files are watched
// is lost. The daemon therefore re-reads everything periodically; this package
// only makes the common case fast.
package hugepagewatch
