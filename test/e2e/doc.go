//go:build e2e

// Package e2e reproduces the incidents hotplugd exists for, end to end, on
// this machine: a real kubelet (v1.37.2, hack/kubebin.sh; the hugepages, static CPU manager and boot incidents also on
// the oldest release hotplugd supports, v1.34.4, $HOTPLUGD_KUBELET_OLDEST)
// on Debian's containerd, registered with a real kube-apiserver and etcd
// (internal/kubeapitest), and hotplugd as a separate process asking for
// that kubelet's restart with a shell script that stands for its supervisor
// (--kubelet-restart-command: stop, hotplugd preflight with the kubelet's
// command line, its exit status ignored as systemd's ExecStartPre=- does,
// start).
//
// Each scenario asserts both sides: the kubelet alone keeps reporting what
// the machine had when it started (or refuses to start), and with hotplugd
// the Node is correct; it measures the time from the change to the Node
// being correct, the kubelet restarts and hotplugd's API writes, and the
// run ends with a table of them.
//
// The files build only with the e2e tag (make e2e):
//
//	go test -tags e2e -count=1 -v -timeout 45m ./test/e2e/
//
// They run as root and skip, saying why, without root, containerd and runc
// (Debian packages containerd and runc) or the kube binaries.
//
// What it changes on the host, and restores also on failure, SIGINT,
// SIGTERM and shortly before go test's -timeout: cpu1's online state and
// hugepage counts (internal/machinetest, whose lock is held while a kubelet
// runs, so no other machine-changing test runs meanwhile); what a kubelet
// changes (the sysctls vm.overcommit_memory, kernel.panic and
// kernel.panic_on_oops, kubepods cgroups in every hierarchy, the bind
// mount of its root directory, /var/lib/kubelet/device-plugins/kubelet.sock
// and /var/log/containers); everything else the kubelet and containerd
// write is under a temporary directory. Every process it starts is stopped
// by its PID.
package e2e
