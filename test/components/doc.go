// Package components tests deploy/kubernetes, its opt-in kustomize
// components and the Helm chart deploy/helm/hotplugd with the real tools,
// as users build them: the report-only base mounts only what reporting
// needs (TestReportOnlyPrivileges); each component changes only what it
// says, by name (an environment variable HOTPLUGD_<FLAG>, mounts), however
// the base's lists moved, with every $(VAR) reference defined before it
// (TestEnvReferences); an overlay may move everything to another namespace
// (TestAnotherNamespace); and the chart renders what kustomize builds for
// the same settings (TestChart), passes helm lint --strict and refuses
// values its schema does not allow:
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
// The tools are $HOTPLUGD_KUSTOMIZE, $HOTPLUGD_PROMTOOL and $HOTPLUGD_HELM
// (make components sets them), else what hack/tool.sh builds (once per
// machine; promtool and helm take about 4-5 minutes each cold on 2 cores). The tests skip, saying why, only
// when hack/tool.sh cannot build them. Nothing on the host is changed; only
// test code lives here.
package components
