// Package vm is scenario 5 of the end-to-end tests: real memory and CPU
// hotplug, in a nested VM, seen by hotplugd running inside it.
//
// QEMU 10 from bookworm-backports emulates a PC (TCG: no KVM on these
// machines) with 1 GiB of memory, room for 4 memory DIMMs up to 8 GiB and
// up to 4 CPUs, and boots Debian's cloud kernel with memory hotplug onlining
// new blocks as movable (memhp_default_state=online_movable), so that they
// can be removed again. hack/vm-assets.sh fetches both, without installing
// anything; the tests skip, saying so, when they are missing or when not
// run as root.
//
// The test builds the initramfs itself: a newc cpio (gzip, reproducible,
// written in Go) with /dev/console, a static /init (./guestinit) and a
// static hotplugd, which /init runs in standalone mode with its JSON log on
// the serial console, each line prefixed "HOTPLUGD ". /init also answers
// commands typed on the console (read a file, write one, power off). The
// test drives QEMU through QMP on a unix socket (device_add and device_del
// of pc-dimm and qemu64-x86_64-cpu devices) and asserts on hotplugd's log:
//
//   - a 1 GiB DIMM is one change, memory +1Gi, after its 16 uevents (8
//     memory blocks of 128 MiB, each add then online), and removing it is
//     one change back;
//   - a hot-added CPU stays offline and hotplugd reports nothing until it
//     is onlined; with --online-new-cpus hotplugd onlines it and reports
//     cpu 1 -> 2 once, within the quiet window and a small margin; removing
//     it and adding it again works the same way.
//
// Nothing is written on the host outside the test's temporary directories;
// QEMU is stopped by its PID when a test ends, also on failure.
//
//	hack/vm-assets.sh    # once per machine: ~25 s, ~200 MB under ~/.cache/hotplugd/vm
//	go test -tags e2e -count=1 -v ./test/e2e/vm/
package vm
