// Package kubeletcompat tests hotplugd's predictions of node capacity,
// allocatable, the kubelet configuration and the CPU and memory managers'
// state files against the kubelet's and cAdvisor's own code (package
// oracle), for every kubelet release hotplugd knows, one at a time: the
// same tests, built with one release's code.
//
// It is a module of its own so that k8s.io/kubernetes and cAdvisor never
// become dependencies of hotplugd. go.mod pins kubelet v1.36.3 (and cAdvisor
// v0.56.2); modules/k8s-<version>.mod pins another release, with build tag
// kubelet_1_<minor>:
//
//	go test ./...                                                  # v1.36.3
//	go test -modfile=modules/k8s-v1.37.2.mod -tags kubelet_1_37 ./...
//	make compat                                                    # every release, in parallel
//
// hack/compat-modules.sh generates the module files from the releases' own
// go.mod (do not edit them, and do not `go mod tidy` here: tidy reads every
// build tag and would mix the releases' cAdvisor modules). What differs
// between releases in the kubelet code the tests call is in oracle's
// kubelet_1_<minor>.go and cadvisor_*.go; a test file carries a build tag
// only where a release lacks what it tests. TestReleaseTableMatchesKubelet
// checks hotplugd's row of the release (pkg/kubeletversion) against it.
//
// The kubelet's start is oracle too (oracle.KubeletFromArgs, Kubelet.Start:
// its command line, feature gates, configuration validation, managers and
// node allocatable check, step by step): TestKubeletStartMatchesKubelet
// holds pkg/kubeletstart to it, TestKubeletStartGateTable keeps
// pkg/kubeletstart's generated feature gate tables equal to each release's
// (-update-gates rewrites them), TestKubeletFlagTable keeps
// pkg/kubeletconfig's generated command-line flag tables equal to each
// release's flag set (-update-flags), and TestPreflightExit2OnlyWhereKubeletRefuses
// holds preflight to its rule over every table here. Tests log their counts
// as "casecount: ..." lines, which internal/casecount prints.
//
// TestIntegration* tests need root and change the machine's CPUs and
// hugepages (restoring them afterwards).
package kubeletcompat
