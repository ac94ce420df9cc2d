package main

import (
	"strings"
	"testing"

	"github.com/spf13/pflag"
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
		{"restart with a command", []string{"--remedy", "restart-kubelet", "--kubelet-restart-command", "rc-service kubelet restart"}, ""},
		{"restart over systemd", []string{"--remedy=restart-kubelet", "--kubelet-unit", "kubelet"}, ""},
		{"unknown remedy", []string{"--remedy", "reboot"}, `--remedy must be report or restart-kubelet, not "reboot"`},
		{"negative daily budget", []string{"--max-restarts-per-day", "-1"}, "--max-restarts-per-day must not be negative"},
		{"no daily budget", []string{"--max-restarts-per-day", "0", "--allow-readiness-reset"}, ""},
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
		"--kubelet-unit", "--kubelet-restart-command", "--max-restarts-per-day", "--allow-readiness-reset", "--dry-run", "--kube-api-qps", "KubeletCapacityStale", "--online-new-cpus"} {
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
