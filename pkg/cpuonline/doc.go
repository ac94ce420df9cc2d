// Package cpuonline brings hot-added CPUs online, as distributions' udev
// rules do (SUBSYSTEM=="cpu", ACTION=="add", ATTR{online}=="0",
// ATTR{online}="1"), for nodes that run no udev or whose rules do not.
//
// A CPU the hypervisor hot-adds arrives OFFLINE: the kernel registers
// /sys/devices/system/cpu/cpuN and sends `add` (then `bind`) for it, and the
// CPU runs nothing until "1" is written to its online file. Until then
// neither the kernel's online list nor the kubelet counts it, and hotplugd
// has no change to report.
//
// What it reads and writes on the host, under a configurable sysfs root
// (default /sys):
//
//	devices/system/cpu/cpuN/online   read; "1" written when it reads "0"
//
// only for the CPU named by a real `add` uevent of the cpu subsystem. This is
// the only file hotplugd writes in sysfs, which is why it is a package of its
// own, behind a flag (--online-new-cpus, off by default), and why it acts on
// nothing else: a CPU an administrator took offline sends `offline`, never
// `add`, and stays offline; synthetic `add` events (udevadm trigger,
// SYNTH_UUID) are ignored for the same reason.
//
// [Onliner.Event] only queues the CPU (it is called from the uevent reader
// and must not block); [Onliner.Run] does the writes, which take the
// kernel's CPU hotplug lock and can take milliseconds. A failure (a read-only
// /sys, a CPU removed again before it was onlined) is logged and counted,
// never fatal. The write itself makes the kernel send `online`, which the
// daemon sees like any other CPU change.
package cpuonline
