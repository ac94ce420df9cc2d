// Package kubeletwatch follows the kubelet hotplugd serves: which process
// it is, the configuration it will start with, its release, and where its
// state files are. It is a source of the daemon like the uevent listener
// and the hugepage watch: the prediction and the remedy read its Facts and
// never discover the kubelet themselves.
//
// The kubelet is discovered again when it may have changed: a new kubelet
// process (its PID gone, or the same PID with another start time), a write
// to its --config file or its --config-dir drop-ins (inotify), and on every
// Refresh (the remedy asks before it acts). No kubelet yet is not a verdict:
// the Watcher keeps looking at every poll, so a kubelet that starts after
// hotplugd (boot order, a crash loop) is found as soon as it runs.
//
// It is a package of its own because both halves of the daemon (the Node
// report and the kubelet restart) must act on the same, current view of the
// kubelet, and because discovery has its own sources (procfs, inotify on
// configuration files) and its own cost to keep low at idle: while the
// kubelet it knows runs, its exit comes through a pidfd in the Go runtime's
// poller and nothing wakes the watcher up (from that exit on, it polls
// until it finds the next kubelet); where there can be no pidfd (a
// procfs of another PID namespace, a kernel before 5.10), a poll reads one
// /proc/<pid>/stat. A kubelet given by the operator (--kubelet-config) has
// no process to follow: only its files are watched.
package kubeletwatch
