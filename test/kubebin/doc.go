// Package kubebin pins the real Kubernetes and etcd programs the integration
// and end-to-end tests run: kube-apiserver, kube-controller-manager,
// kube-scheduler, the kubelet (k8s.io/kubernetes v1.36.3) and etcd
// (go.etcd.io/etcd/server/v3 v3.6.8), built from the Go module proxy by
// hack/kubebin.sh. It is a module of its own so that these large dependency
// graphs never enter hotplugd's go.mod; it holds no code.
package kubebin
