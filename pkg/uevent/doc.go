// Package uevent reads the kernel's uevents: the notifications it sends when
// a device appears, goes away, or changes state, such as a CPU or memory
// block being hot-added, onlined or offlined.
//
// It reads a NETLINK_KOBJECT_UEVENT (15) netlink socket bound to multicast
// group 1, where the kernel broadcasts, not group 2, where udevd re-sends
// events after processing them. A datagram carries no netlink header:
//
//	ACTION@DEVPATH\0ACTION=...\0DEVPATH=...\0SUBSYSTEM=...\0SEQNUM=...\0
//
// Parse decodes one datagram. A Listener owns the socket; its Run method
// reads until its context is done, passes the events that change the
// machine's CPUs, memory or NUMA nodes (Event.Relevant) to a Handler, and
// drops the rest. The socket is opened with github.com/mdlayher/netlink and
// read through its raw connection; a read blocks in the runtime's network
// poller, so cancelling the context sets a read deadline in the past and
// Run returns at once.
//
// Uevents can be lost: the kernel drops them when the socket's receive queue
// is full and reports ENOBUFS once. Listen therefore asks for a large receive
// buffer (16 MiB by default, with SO_RCVBUFFORCE when privileged). Run never
// stops on a loss: it tells the Handler with Overflow, after which the
// receiver must re-read everything it follows, and goes on reading. Overflow
// is called when the kernel's queue has been drained after ENOBUFS, which is
// when the loss ends, or when SEQNUMs skip and the kernel's drop counter
// (SK_MEMINFO_DROPS) grew. SEQNUMs also skip without any loss, for uevents the
// kernel sends only to other network namespaces (a container's loopback and
// veth devices): those gaps are counted, not reported.
//
// The kernel sends uevents only to sockets in the initial network namespace,
// so a daemon in a pod needs the host network. Reading needs no privilege;
// raising the receive buffer above net.core.rmem_max needs CAP_NET_ADMIN.
package uevent
