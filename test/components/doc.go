// Package components tests the opt-in kustomize components of
// deploy/kubernetes with the real tools, as users add them to an overlay of
// it; each must change only what it says, and fail `kustomize build` (not
// patch some other argument) when the base's arguments moved:
//
//   - monitoring, the DaemonSet's monitoring with the Prometheus Operator:
//     kustomize builds it into testdata/overlay, the DaemonSet must come
//     out patched to serve /metrics and /healthz on the node's address and
//     nothing else of the base may change; promtool checks the
//     PrometheusRule's rules and runs testdata/rules_test.yaml on them;
//   - restart-kubelet, --remedy=restart-kubelet instead of the base's
//     report, and the directories of the kubelet's binary and of its
//     unit's environment file mounted read-only at their host paths, alone
//     and with monitoring. test/e2e/node runs it on a
//     systemd node.
//
// The tools are $HOTPLUGD_KUSTOMIZE and $HOTPLUGD_PROMTOOL (make components
// sets them), else what hack/tool.sh builds (once per machine; promtool
// takes about 4 minutes cold on 2 cores). The tests skip, saying why, only
// when hack/tool.sh cannot build them. Nothing on the host is changed; only
// test code lives here.
package components
