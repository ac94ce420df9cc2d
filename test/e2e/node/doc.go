// Package node runs a whole systemd node in a VM and the seeds' incidents
// on it as they happened: a Debian bookworm node (hack/node-image.sh: systemd
// as PID 1, containerd, runc, the kubelet of hack/kubebin.sh laid out as
// kubeadm lays it out) under QEMU's TCG, joined to an API server on the host
// (internal/kubeapitest), with hotplugd installed by docs/install.md's own
// commands, `--remedy=restart-kubelet` through systemd's D-Bus API: one
// RestartUnit job that systemd owns, the state files repaired by hotplugd
// preflight in the kubelet's start (ExecStartPre=-, never blocking).
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
// One node lives through four boots on one disk (a sparse copy of the
// cached image): boot 1 (2 CPUs) for scenarios 6, 1, 5, 7, 8 and 11; boot
// 2 (2 CPUs) for 4 alone; boot 3 (3 CPUs) for 3 alone; boot 4 (3 CPUs) for
// 3 and 4 with hotplugd at once, then 2, 9 and 10. The seeds' incidents (1
// to 4) run first with the kubelet alone, then with hotplugd:
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
//     shows them with hotplugd, not without (with hotplugd in the same
//     boot as 3's);
//  5. systemd: the STATUS line, the HOTPLUG_* journal fields, the watchdog
//     (SIGSTOP), reload, and the hardening with nothing denied;
//  6. the DaemonSet instead of the unit (first, in boot 1; the node's
//     provisioning installed hotplugd's binary and the preflight drop-in
//     before the kubelet's first start): deploy/kubernetes with
//     components/restart-kubelet through the real kustomize
//     (internal/deploytest), the host's controller manager and scheduler,
//     the image `make image` built imported into the guest's containerd; a
//     DIMM hot-add is remedied by the pod, which asks the host's systemd
//     over D-Bus for the restart with every capability dropped but
//     NET_ADMIN, and the pinned pod and the pod itself are unchanged.
//     The controllers and the DaemonSet are removed before the unit's
//     scenarios (the node lifecycle controller would taint the Node while
//     the VM is off between boots);
//  7. the restart withheld (boot 1): a drift (2Mi hugepages set) while
//     KUBELET_EXTRA_ARGS is staged in /etc/default/kubelet, while the
//     kubelet's config file is edited, and while kubelet.service is masked
//     (--runtime, as it runs): no restart, one RestartWithheld Event each,
//     watched for longer than a retry would take;
//  8. hotplugd's binary removed with the drop-in left (boot 1): `systemctl
//     restart kubelet` starts the kubelet (the "-" prefix);
//  9. a plain kubelet unit (ExecStart=/usr/bin/kubelet --config=...
//     --cpu-manager-policy=static, kubeadm's drop-in masked; boot 4): the
//     valid static state passes preflight and the kubelet starts; CPU 4
//     offline is repaired by preflight in the start hotplugd asks for;
//  10. SIGKILL during a remedy (boot 4): hotplugd's unit, then the
//     DaemonSet's pod's process (the unit stopped: one hotplugd per node),
//     killed before the restart is asked, while systemd's restart job runs,
//     while preflight repairs (the fault points of a -tags faultinject
//     build, internal/faultpoint; the pod by what can be seen of it), and
//     during the verification; after each, the kubelet active, its state
//     files valid (hotplugd preflight --dry-run), at most one kubelet
//     start, and the Node current within 2 minutes. hotplugd and preflight
//     are told the kubelet's version here (--kubelet-version,
//     HOTPLUGD_PREFLIGHT_ARGS): the scenario is about the kills, not the
//     version's discovery (see faults_test.go). One trial per moment;
//     TestNodeFaults runs scenario 10 alone on one boot with
//     $HOTPLUGD_NODE_FAULT_TRIALS per moment (make e2e-node-faults: 20);
//  11. readiness through a remedy (boot 1): a pod with a readiness probe
//     (test/e2e/node/probed) behind a headless Service, its endpoint in the
//     EndpointSlice of the host's controller manager; a drift remedied by
//     hotplugd's unit with one kubelet restart; a watch of the Service's
//     EndpointSlices from before the drift until after the remedy is
//     verified sees the pod's endpoint ready in every event (kubelet 1.36
//     keeps readiness through a restart), and, as a control, its leaving
//     when the pod is deleted.
//
// QEMU is killed by its PID and the temporary directories removed when the
// test ends, also on failure and shortly before go test's -timeout.
//
//	make e2e-node
//	make e2e-node-faults FAULT_TRIALS=20
package node
