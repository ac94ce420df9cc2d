// Package kubeclient is hotplugd's client of the Kubernetes API: typed
// clients of the resources hotplugd reads and writes (Nodes and Events,
// DaemonSets, Leases) and no others, over client-go's rest package. Their
// requests are those of client-go's generated clients, byte for byte
// (protobuf for the typed objects; the test compares them).
//
// Not client-go's Clientset, for the daemon's memory (issue 23). Every
// typed client of client-go's kubernetes tree imports its scheme package,
// whose package initialisation registers the types of every API group
// (about fifty group versions) at each start, in every process, also in
// --standalone, where no client is made: that start-up touches code and
// type data of those groups all over the binary, and they stay resident,
// about 6 MiB of the daemon's idle RSS. Nor client-go's gentype, which the
// generated clients are built on: its package holds client-go's fake
// clients too, and links their object tracker, structured-merge-diff's
// typed objects and the managed fields (about 0.7 MiB more). Here the
// scheme has core/v1, apps/v1 and coordination.k8s.io/v1 and is built by
// NewForConfig, so a daemon without a cluster builds none.
//
// The interfaces have the method sets of client-go's typed clients (the
// subset hotplugd calls), so client-go's own clients satisfy them: tests
// pass a fake clientset through internal/kubeclienttest.
package kubeclient
