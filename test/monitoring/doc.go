// Package monitoring tests deploy/kubernetes/components/monitoring, the
// opt-in monitoring of the DaemonSet with the Prometheus Operator, with the
// real tools: kustomize builds it into testdata/overlay (deploy/kubernetes
// plus the component, as users add it), the DaemonSet must come out patched
// to serve /metrics and /healthz on the node's address and nothing else of
// the base may change; promtool checks the PrometheusRule's rules and runs
// testdata/rules_test.yaml on them.
//
// The tools are $HOTPLUGD_KUSTOMIZE and $HOTPLUGD_PROMTOOL (make monitoring
// sets them), else what hack/tool.sh builds (once per machine; promtool
// takes about 13 minutes cold on 2 cores). The tests skip, saying why, only
// when hack/tool.sh cannot build them. Nothing on the host is changed; only
// test code lives here.
package monitoring
