package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	"go.uber.org/zap"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
)

// runOpts parses args as `hotplugd run` does.
func runOpts(t *testing.T, args ...string) *runOptions {
	t.Helper()
	var o runOptions
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return &o
}

func TestRunOptionsValidate(t *testing.T) {
	tests := []struct {
		name    string
		args    []string
		wantErr string // "" for valid
	}{
		{"defaults (cluster, report)", nil, ""},
		{"standalone", []string{"--standalone"}, ""},
		{"restart with commands", []string{"--remedy", "restart-kubelet", "--kubelet-stop-command", "a", "--kubelet-start-command", "b"}, ""},
		{"restart over systemd", []string{"--remedy=restart-kubelet", "--kubelet-unit", "kubelet"}, ""},
		{"unknown remedy", []string{"--remedy", "reboot"}, `--remedy must be report or restart-kubelet, not "reboot"`},
		{"stop without start", []string{"--kubelet-stop-command", "a"}, "go together"},
		{"bad memory delta", []string{"--min-memory-delta", "lots"}, `--min-memory-delta "lots"`},
		{"negative memory delta", []string{"--min-memory-delta", "-1Mi"}, "must not be negative"},
		{"zero timeout", []string{"--remedy-timeout", "0s"}, "--remedy-timeout must be positive"},
		{"zero qps", []string{"--kube-api-qps", "0"}, "--kube-api-qps"},
		{"standalone with a remedy", []string{"--standalone", "--remedy", "restart-kubelet"}, "--standalone touches no cluster"},
		{"standalone with a node", []string{"--standalone", "--node-name", "x"}, "--standalone touches no cluster"},
		{"quiet window", []string{"--quiet-window", "0s"}, "--quiet-window must be positive"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := runOpts(t, tt.args...).Validate()
			switch {
			case tt.wantErr == "" && err != nil:
				t.Errorf("Validate() = %v, want nil", err)
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("Validate() = %v, want an error containing %q", err, tt.wantErr)
			}
		})
	}
}

func TestRunOptionsMinMemoryDelta(t *testing.T) {
	o := runOpts(t)
	if err := o.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := o.minMemoryDelta.String(); got != "100Mi" {
		t.Errorf("default --min-memory-delta = %s, want 100Mi (KEP-3953's threshold)", got)
	}
}

func TestNodeName(t *testing.T) {
	t.Setenv("NODE_NAME", "from-env")
	if n, _ := runOpts(t, "--node-name", "flag").nodeName(); n != "flag" {
		t.Errorf("--node-name: %q", n)
	}
	if n, _ := runOpts(t).nodeName(); n != "from-env" {
		t.Errorf("$NODE_NAME: %q", n)
	}
	t.Setenv("NODE_NAME", "")
	if n, _ := runOpts(t).nodeName(); n == "" || strings.ToLower(n) != n {
		t.Errorf("host name: %q, want it in lower case", n)
	}
}

func TestRunHelp(t *testing.T) {
	code, _, stderr := runCmd("run", "--help")
	if code != 0 {
		t.Errorf("exit code %d", code)
	}
	for _, flag := range []string{"--standalone", "--node-name", "--kubeconfig", "--remedy", "--settle", "--min-memory-delta",
		"--kubelet-unit", "--kubelet-stop-command", "--dry-run", "--kube-api-qps", "KubeletCapacityStale", "--online-new-cpus"} {
		if !strings.Contains(stderr, flag) {
			t.Errorf("run --help does not mention %s", flag)
		}
	}
}

func TestRunWithoutCluster(t *testing.T) {
	t.Setenv("KUBECONFIG", "/nonexistent/kubeconfig")
	t.Setenv("KUBERNETES_SERVICE_HOST", "")
	code, _, stderr := runCmd("run", "--node-name", "n", "--procfs-root", t.TempDir(), "--metrics-addr", "")
	if code != 1 || !strings.Contains(stderr, "--standalone") {
		t.Errorf("exit %d, stderr %q: want 1 and a hint to --standalone", code, stderr)
	}
}

// TestKubeletRelease: which version the daemon predicts for, and that a
// kubelet it does not know leaves it capacity only, with the reason.
func TestKubeletRelease(t *testing.T) {
	nodeWith := func(version string) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: corev1.NodeStatus{NodeInfo: corev1.NodeSystemInfo{KubeletVersion: version}}}
	}
	dir := t.TempDir()
	bin := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho 'Kubernetes v1.34.4'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	proc := filepath.Join(dir, "proc")
	if err := os.MkdirAll(filepath.Join(proc, "7"), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(bin, filepath.Join(proc, "7", "exe")); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name      string
		flag      string
		pid       int
		node      *corev1.Node
		wantMinor int
		wantLimit string
	}{
		{"the flag wins", "v1.37.2", 7, nodeWith("v1.36.3"), 37, ""},
		{"the binary wins over the Node", "", 7, nodeWith("v1.36.3"), 34, ""},
		{"the Node without a process", "", 0, nodeWith("v1.35.4"), 35, ""},
		{"the Node when the binary cannot be read", "", 8, nodeWith("v1.36.3"), 36, ""},
		{"a pre-release", "", 0, nodeWith("v1.38.0-alpha.0"), 0, "capacity only, no remedy: kubelet v1.38.0-alpha.0 is not a release hotplugd knows (it knows 1.34, 1.35, 1.36, 1.37)"},
		{"too old", "v1.33.1", 7, nil, 0, "kubelet v1.33.1 is not a release hotplugd knows"},
		{"nothing to tell", "", 0, nil, 0, "capacity only, no remedy: the kubelet's version is unknown (reading Node n: "},
	} {
		t.Run(tt.name, func(t *testing.T) {
			o := runOptions{ProcfsRoot: proc, KubeletVersion: tt.flag}
			client := fake.NewSimpleClientset()
			if tt.node != nil {
				client = fake.NewSimpleClientset(tt.node)
			}
			var k *kubeletconfig.Kubelet
			if tt.pid != 0 {
				k = &kubeletconfig.Kubelet{PID: tt.pid}
			}
			rel, limit := o.kubeletRelease(k, client, "n", zap.NewNop())
			switch {
			case tt.wantMinor == 0 && (rel != nil || !strings.Contains(limit, tt.wantLimit)):
				t.Errorf("got %v, %q; want no release and %q", rel, limit, tt.wantLimit)
			case tt.wantMinor != 0 && (rel == nil || rel.Minor != tt.wantMinor || limit != ""):
				t.Errorf("got %v, %q; want 1.%d", rel, limit, tt.wantMinor)
			}
		})
	}
}
