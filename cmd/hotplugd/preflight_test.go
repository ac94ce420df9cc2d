package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
)

// preflightEnv is a machine with n CPUs, a kubelet root directory holding
// the 8-CPU state file c03, and a static-policy kubelet configuration.
func preflightEnv(t *testing.T, cpus int) (args []string, statePath string, old []byte) {
	t.Helper()
	machine := t.TempDir()
	m := fixturegen.OneNode(cpus, 8<<20, 0)
	if err := m.WriteDir(machine); err != nil {
		t.Fatal(err)
	}
	root := t.TempDir()
	old, err := os.ReadFile("../../pkg/cpumgr/testdata/c03-static-8cpu-2entries.cpu_manager_state")
	if err != nil {
		t.Fatal(err)
	}
	statePath = filepath.Join(root, "cpu_manager_state")
	if err := os.WriteFile(statePath, old, 0o644); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(root, "config.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	args = []string{"preflight", "--kubelet-root-dir", root, "--kubelet-config", cfg,
		"--sysfs-root", filepath.Join(machine, "sys"), "--procfs-root", filepath.Join(machine, "proc")}
	return args, statePath, old
}

func TestPreflightCommand(t *testing.T) {
	tests := []struct {
		name        string
		cpus        int
		extra       []string
		wantCode    int
		wantOut     string
		wantChanged bool
	}{
		{"more CPUs: repaired", 16, nil, 0, "cpu_manager_state: repaired", true},
		{"more CPUs, dry run: plan only", 16, []string{"--dry-run"}, 0, "cpu_manager_state: would repair", false},
		{"same CPUs: valid", 8, nil, 0, "cpu_manager_state: valid", false},
		{"fewer CPUs: needs a person", 4, nil, 2, "what to do: drain the node", false},
		{"fewer CPUs after a drain", 4, []string{"--allow-drop-assignments"}, 0, "cpu_manager_state: repaired", true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			args, path, old := preflightEnv(t, tt.cpus)
			code, out, stderr := runCmd(append(args, tt.extra...)...)
			if code != tt.wantCode {
				t.Errorf("exit %d, want %d; stdout:\n%s\nstderr:\n%s", code, tt.wantCode, out, stderr)
			}
			if !strings.Contains(out, tt.wantOut) {
				t.Errorf("stdout does not say %q:\n%s", tt.wantOut, out)
			}
			now, _ := os.ReadFile(path)
			if changed := string(now) != string(old); changed != tt.wantChanged {
				t.Errorf("file changed = %v, want %v", changed, tt.wantChanged)
			}
		})
	}
}

func TestPreflightJSONAndErrors(t *testing.T) {
	args, _, _ := preflightEnv(t, 16)
	code, out, _ := runCmd(append(args, "--dry-run", "-o", "json")...)
	var rep struct {
		Results []struct{ File, Verdict, Plan string }
	}
	if code != 0 || json.Unmarshal([]byte(out), &rep) != nil || len(rep.Results) != 2 || rep.Results[0].Verdict != "would repair" {
		t.Errorf("json: exit %d, %+v from:\n%s", code, rep, out)
	}
	if code, _, stderr := runCmd("preflight", "--kubelet-config", "/nonexistent.yaml"); code != 1 || !strings.Contains(stderr, "kubeletconfig: read /nonexistent.yaml") {
		t.Errorf("missing config: exit %d, stderr %q", code, stderr)
	}
	if code, _, stderr := runCmd("preflight", "-o", "yaml"); code != 2 || !strings.Contains(stderr, "--output must be text or json") {
		t.Errorf("bad output: exit %d, stderr %q", code, stderr)
	}
}
