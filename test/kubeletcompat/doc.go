// Package kubeletcompat tests hotplugd's predictions of node capacity,
// allocatable and the kubelet configuration against the kubelet's and
// cAdvisor's own code (package oracle), pinned at the versions a kubelet
// v1.36.3 is built with.
//
// It is a module of its own so that k8s.io/kubernetes and cAdvisor never
// become dependencies of hotplugd. Run it with `go test ./...` from this
// directory; TestIntegration* tests need root and change the machine's CPUs
// and hugepages (restoring them afterwards).
package kubeletcompat
