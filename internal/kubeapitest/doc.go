// Package kubeapitest runs a real Kubernetes API server for tests: etcd and
// kube-apiserver (the binaries hack/kubebin.sh builds from the Go module
// proxy, pinned by test/kubebin/go.mod), as child processes on 127.0.0.1.
//
// Start picks free loopback ports and makes a temporary directory holding
// everything the servers use: a self-signed serving certificate
// (Server.CACertFile, for 127.0.0.1 and localhost), an RSA service account
// key generated in Go (so the TokenRequest API works and bound tokens carry
// the node name of their pod), a static token file with one admin token in
// system:masters, etcd's data (written without fsync) and, unless
// Options.Log is set, the servers' logs. kube-apiserver runs with RBAC
// authorization and its default admission plugins, so RBAC rules and
// ValidatingAdmissionPolicies are enforced as in a cluster. Nothing else
// runs unless asked: no controller manager, scheduler or kubelet, so a Pod
// is only an object, and the kubernetes Service has no endpoints.
// StartControllers adds kube-controller-manager and kube-scheduler (the
// end-to-end tests' one-node cluster, with their own kubelet).
//
// Guarantees: Start returns only once /readyz answers ok, and on error it
// has stopped what it started and removed the directory. Every process is
// started in its own process group, is stopped by its PID (SIGTERM, then
// SIGKILL after 10 s) and never by name, and is killed by the kernel if the
// test process dies first. Stop removes the directory. StopAPIServer and
// StartAPIServer take the API server away and bring it back on the same
// URL, with the same credentials and the same etcd, for outage tests.
//
// Tests skip, saying why, when BinDir reports that the binaries are not
// built: a test never builds them (that takes about 8 minutes; run
// hack/kubebin.sh or make test once).
package kubeapitest
