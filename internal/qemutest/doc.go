// Package qemutest drives a QEMU guest for the end-to-end tests: a client
// of QEMU's machine protocol (QMP) and the hotplug commands the tests send
// through it (a CPU into the first free slot, a pc-dimm with its memory
// backend, and their removal).
//
// It is its own package because two test packages boot guests: test/e2e/vm
// (hotplugd alone in an initramfs) and test/e2e/node (a systemd node with
// a kubelet). Nothing of hotplugd imports it.
package qemutest
