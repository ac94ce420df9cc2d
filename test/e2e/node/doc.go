// Package node runs a whole systemd node in a VM and the seeds' incidents
// on it as they happened: a Debian bookworm node (hack/node-image.sh: systemd
// as PID 1, containerd, runc, the kubelet of hack/kubebin.sh laid out as
// kubeadm lays it out) under QEMU's TCG, joined to an API server on the host
// (internal/kubeapitest), with hotplugd installed by the README's own
// commands, `--remedy=restart-kubelet` through systemd's D-Bus API.
//
// The API server runs on the host, not in the guest: a guest API server
// (etcd and kube-apiserver under TCG) would take minutes to start at every
// boot and the memory the scenarios hot-add, and the host's one is the same
// as every other e2e package's. The guest's network is QEMU's user-mode
// network with restrict=on: its only way out is a guestfwd of 10.0.2.100:6443
// to the API server's port on the host's 127.0.0.1 (this test binary, run
// by QEMU per connection as a forwarder); the host reaches the guest's test
// agent (test/e2e/node/agent) and kubelet API by hostfwd on 127.0.0.1.
//
// One node lives through five boots on one disk (a sparse copy of the
// cached image), each scenario first with the kubelet alone, then with
// hotplugd:
//
//  1. memory hot-add while the kubelet runs (a pc-dimm through QMP): alone
//     the Node keeps its memory; with hotplugd capacity and allocatable
//     follow through one restart, and the kubelet's summary API
//     (availableBytes + workingSetBytes) agrees with the new capacity;
//  2. CPU hot-add under a Guaranteed pod pinned to CPU 1 (static CPU
//     manager, systemReserved 500m, which the static policy rounds up to
//     CPU 0): the state is rebuilt, the pod keeps its
//     container and CPU, the new CPUs join the shared pool;
//  3. the CPU-upgrade reboot (2 -> 3 CPUs, same disk): alone the kubelet
//     fails with its own "current set of available CPUs" error; with
//     hotplugd's preflight in ExecStartPre it starts, the pod's assignment
//     kept;
//  4. hugepages set at boot by a unit ordered after the kubelet: the Node
//     shows them with hotplugd, not without;
//  5. systemd: the STATUS line, the HOTPLUG_* journal fields, the watchdog
//     (SIGSTOP), reload, and the hardening with nothing denied;
//  6. the DaemonSet instead of the unit (first, in boot 1): deploy/kubernetes
//     with components/restart-kubelet through the real kustomize
//     (internal/deploytest), the host's controller manager and scheduler,
//     the image `make image` built imported into the guest's containerd; a
//     DIMM hot-add is remedied by the pod, which restarts the kubelet
//     through the host's systemd over D-Bus with every capability dropped
//     but NET_ADMIN, and the pinned pod and the pod itself are unchanged.
//     The controllers and the DaemonSet are removed before the unit's
//     scenarios (the node lifecycle controller would taint the Node while
//     the VM is off between boots).
//
// QEMU is killed by its PID and the temporary directories removed when the
// test ends, also on failure and shortly before go test's -timeout.
//
//	make e2e-node
package node
