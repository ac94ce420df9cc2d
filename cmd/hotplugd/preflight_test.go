package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
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
		"--sysfs-root", filepath.Join(machine, "sys"), "--procfs-root", filepath.Join(machine, "proc"), "--kubelet-version", "v1.36.3"}
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
		wantStderr  string
	}{
		{"more CPUs: repaired", 16, nil, 0, "cpu_manager_state: repaired", true, ""},
		{"more CPUs, dry run: plan only", 16, []string{"--dry-run"}, 0, "cpu_manager_state: would repair", false, ""},
		{"same CPUs: valid", 8, nil, 0, "cpu_manager_state: valid", false, ""},
		{"fewer CPUs: needs a person", 4, nil, 2, "what to do: drain the node", false, ""},
		{"fewer CPUs after a drain", 4, []string{"--allow-drop-assignments"}, 0, "cpu_manager_state: repaired", true, ""},
		// A 1.36 file on a node upgraded to 1.37: repaired in 1.37's layout.
		{"more CPUs, kubelet 1.37", 16, []string{"--kubelet-version", "v1.37.2"}, 0, "cpu_manager_state: repaired", true, ""},
		{"fewer CPUs, kubelet 1.34", 4, []string{"--kubelet-version", "v1.34.4"}, 2, "what to do: drain the node", false, ""},
		// A kubelet hotplugd does not know is never blocked, its files never
		// rewritten.
		{"fewer CPUs, a 1.38 pre-release", 4, []string{"--kubelet-version", "v1.38.0-alpha.0"}, 0, "cpu_manager_state: unknown", false,
			"the kubelet is v1.38.0-alpha.0 and hotplugd knows kubelet 1.34, 1.35, 1.36, 1.37 only"},
		{"more CPUs, kubelet 1.33", 16, []string{"--kubelet-version", "v1.33.7"}, 0, "cpu_manager_state: unknown", false,
			"kubelet v1.33.7 (hotplugd knows 1.34, 1.35, 1.36, 1.37)"},
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
			if tt.wantStderr != "" && (!strings.Contains(stderr, tt.wantStderr) || !strings.Contains(stderr, path)) {
				t.Errorf("stderr does not say %q and name %s:\n%s", tt.wantStderr, path, stderr)
			}
			now, _ := os.ReadFile(path)
			if changed := string(now) != string(old); changed != tt.wantChanged {
				t.Errorf("file changed = %v, want %v", changed, tt.wantChanged)
			}
		})
	}
}

// TestPreflightKubeletBinary: the version comes from the kubelet's own
// --version; a binary that cannot say leaves the files alone.
func TestPreflightKubeletBinary(t *testing.T) {
	dir := t.TempDir()
	fake := func(name, script string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte("#!/bin/sh\n"+script+"\n"), 0o755); err != nil {
			t.Fatal(err)
		}
		return p
	}
	for _, tt := range []struct {
		name, bin, wantOut, wantStderr string
		wantCode                       int
	}{
		{"1.36", fake("k136", `echo "Kubernetes v1.36.3"`), "what to do: drain the node", "", 2},
		{"1.38 alpha", fake("k138", `echo "Kubernetes v1.38.0-alpha.0"`), "cpu_manager_state: unknown", "v1.38.0-alpha.0", 0},
		{"not a kubelet", fake("other", `echo hello`), "cpu_manager_state: unknown", "cannot tell the kubelet's version", 0},
		{"missing", filepath.Join(dir, "missing"), "cpu_manager_state: unknown", "cannot tell the kubelet's version", 0},
	} {
		t.Run(tt.name, func(t *testing.T) {
			args, path, old := preflightEnv(t, 4)
			args = slices.DeleteFunc(args, func(a string) bool { return a == "--kubelet-version" || a == "v1.36.3" })
			code, out, stderr := runCmd(append(args, "--kubelet-binary", tt.bin)...)
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) || !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("exit %d (want %d); stdout (want %q):\n%s\nstderr (want %q):\n%s", code, tt.wantCode, tt.wantOut, out, tt.wantStderr, stderr)
			}
			if now, _ := os.ReadFile(path); string(now) != string(old) {
				t.Error("the file changed")
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
	// Whatever preflight cannot judge (its own flags, the kubelet's
	// configuration, the machine) is a warning, never a block: the kubelet
	// says itself what it makes of its configuration.
	for _, tt := range []struct {
		name       string
		args       []string
		wantStderr string
	}{
		{"missing config", []string{"preflight", "--kubelet-config", "/nonexistent.yaml"}, "read --config"},
		{"missing config after --", []string{"preflight", "--", "--config=/nonexistent.yaml"}, "read --config"},
		{"a kubelet command line it cannot read", []string{"preflight", "--", "--root-dir=/x", "stray"}, `unexpected argument "stray"`},
		{"bad output", []string{"preflight", "-o", "yaml"}, "--output must be text or json"},
		{"unknown flag", []string{"preflight", "--no-such-flag"}, "unknown flag: --no-such-flag"},
		{"arguments before --", []string{"preflight", "--config=x"}, "unknown flag"},
		{"positional before --", []string{"preflight", "x", "--", "--config=x"}, `the kubelet's arguments go after "--"`},
		{"unreadable machine", []string{"preflight", "--sysfs-root", "/nonexistent", "--kubelet-version", "v1.36.3"}, "cannot read the machine"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, _, stderr := runCmd(tt.args...)
			if code != 0 || !strings.Contains(stderr, tt.wantStderr) || !strings.Contains(stderr, "warning") {
				t.Errorf("exit %d (want 0), stderr (want a warning with %q): %q", code, tt.wantStderr, stderr)
			}
		})
	}
}

// TestPreflightKubeletArgs: preflight reads the kubelet's own command line
// after "--" as the kubelet does (issue 11, point 1): a static policy set by
// flag over a config file that sets none is the static policy, and
// --root-dir says where the state files are.
func TestPreflightKubeletArgs(t *testing.T) {
	base, path, old := preflightEnv(t, 8)
	root := filepath.Dir(path)
	none := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(none, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The machine and version flags of preflightEnv, not its kubelet ones.
	var common []string
	for i := 0; i < len(base); i++ {
		switch base[i] {
		case "--kubelet-root-dir", "--kubelet-config":
			i++
		case "preflight":
		default:
			common = append(common, base[i])
		}
	}
	pre := append([]string{"preflight"}, common...)
	for _, tt := range []struct {
		name     string
		args     []string
		wantCode int
		wantOut  string
	}{
		{"policy and reservation by flag", append(append([]string{}, pre...), "--", "--config="+none, "--cpu-manager-policy=static", "--reserved-cpus=0", "--root-dir="+root), 0, "cpu_manager_state: valid"},
		{"with the kubelet's binary first", append(append([]string{}, pre...), "--", "/usr/bin/kubelet", "--config", none, "--cpu-manager-policy", "static", "--reserved-cpus", "0", "--root-dir", root), 0, "cpu_manager_state: valid"},
		{"the flag wins over the shorthand", append(append([]string{}, pre...), "--kubelet-root-dir=/nonexistent", "--", "--config="+none, "--cpu-manager-policy=static", "--reserved-cpus=0", "--root-dir="+root), 0, "cpu_manager_state: valid"},
		// Without the flags the kubelet's policy is none: it refuses the
		// static checkpoint, and so does preflight.
		{"config alone: policy none", append(append([]string{}, pre...), "--", "--config="+none, "--root-dir="+root), 2, `configured policy "none" differs from state checkpoint policy "static"`},
		// Another root dir: the files there are what is checked.
		{"root dir elsewhere", append(append([]string{}, pre...), "--", "--config="+none, "--root-dir="+t.TempDir()), 0, "cpu_manager_state: absent"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			code, out, stderr := runCmd(tt.args...)
			if code != tt.wantCode || !strings.Contains(out, tt.wantOut) {
				t.Errorf("exit %d (want %d); stdout (want %q):\n%s\nstderr:\n%s", code, tt.wantCode, tt.wantOut, out, stderr)
			}
			if now, _ := os.ReadFile(path); string(now) != string(old) {
				t.Error("the file changed")
			}
		})
	}
}

// failingWriter fails every write, as a closed stdout does.
type failingWriter struct{}

func (failingWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestPreflightReportWriteFails: a report that cannot be written to stdout
// goes to stderr, and the exit code still follows the verdict.
func TestPreflightReportWriteFails(t *testing.T) {
	for _, format := range []string{"text", "json"} {
		t.Run(format, func(t *testing.T) {
			args, _, _ := preflightEnv(t, 4)
			var stderr bytes.Buffer
			code := run(append(args, "-o", format), failingWriter{}, &stderr)
			if code != 2 || !strings.Contains(stderr.String(), "broken pipe") || !strings.Contains(stderr.String(), "what to do: drain the node") {
				t.Errorf("exit %d (want 2), stderr (want the error and the report):\n%s", code, stderr.String())
			}
		})
	}
}

// TestPreflightPanicIsNotTheBlockCode (issue 19, point 3): a panic in
// preflight exits 3, not 2 (which says the kubelet would refuse to start),
// with the panic and what it means on stderr; the state file is untouched.
func TestPreflightPanicIsNotTheBlockCode(t *testing.T) {
	args, state, old := preflightEnv(t, 16)
	defer func(f func(*topology.Snapshot, preflight.Options) preflight.Report) { runPreflightReport = f }(runPreflightReport)
	runPreflightReport = func(*topology.Snapshot, preflight.Options) preflight.Report { panic("a bug") }
	code, _, stderr := runCmd(args...)
	if code != exitPanic {
		t.Errorf("exit code %d, want %d", code, exitPanic)
	}
	for _, want := range []string{"internal error", "a bug", "the kubelet judges them at its start"} {
		if !strings.Contains(stderr, want) {
			t.Errorf("stderr does not say %q:\n%s", want, stderr)
		}
	}
	if got, _ := os.ReadFile(state); !bytes.Equal(got, old) {
		t.Error("state file changed")
	}
}

// TestPreflightUnitUnreadable: --kubelet-unit without a systemd to ask
// (here a bus address nobody listens on) checks nothing, changes nothing,
// exits 0 with a warning that names the unit.
func TestPreflightUnitUnreadable(t *testing.T) {
	_, state, old := preflightEnv(t, 16)
	t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+filepath.Join(t.TempDir(), "no-bus"))
	code, _, stderr := runCmd("preflight", "--kubelet-unit=kubelet.service", "--kubelet-version", "v1.36.3")
	if code != 0 {
		t.Errorf("exit code %d, want 0", code)
	}
	if !strings.Contains(stderr, "cannot read the kubelet's command line from its unit kubelet.service") || !strings.Contains(stderr, "checking nothing, changing nothing") {
		t.Errorf("stderr:\n%s", stderr)
	}
	if got, _ := os.ReadFile(state); !bytes.Equal(got, old) {
		t.Error("state file changed")
	}
}

// TestPreflightVersionCache: with --version-cache, the kubelet's start runs
// its binary once; the next start of the same binary takes the version from
// the cache and judges by it, and a cache it cannot write is a warning.
func TestPreflightVersionCache(t *testing.T) {
	dir := t.TempDir()
	runs := filepath.Join(dir, "runs")
	bin := filepath.Join(dir, "kubelet")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\necho run >> "+runs+"\necho 'Kubernetes v1.36.3'\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cache := filepath.Join(dir, "hotplugd", "kubelet-version.json")
	for i := range 3 {
		args, path, old := preflightEnv(t, 4)
		args = slices.DeleteFunc(args, func(a string) bool { return a == "--kubelet-version" || a == "v1.36.3" })
		code, out, stderr := runCmd(append(args, "--kubelet-binary", bin, "--version-cache", cache)...)
		if code != 2 || !strings.Contains(out, "what to do: drain the node") || stderr != "" {
			t.Errorf("start %d: exit %d (want 2, judged as 1.36); stdout:\n%s\nstderr:\n%s", i+1, code, out, stderr)
		}
		if now, _ := os.ReadFile(path); string(now) != string(old) {
			t.Error("the file changed")
		}
		if b, _ := os.ReadFile(runs); string(b) != "run\n" {
			t.Fatalf("after start %d the binary ran %d times, want once", i+1, strings.Count(string(b), "run"))
		}
	}
	args, _, _ := preflightEnv(t, 16)
	args = slices.DeleteFunc(args, func(a string) bool { return a == "--kubelet-version" || a == "v1.36.3" })
	code, out, stderr := runCmd(append(args, "--kubelet-binary", bin, "--version-cache", filepath.Join(runs, "not-a-dir"))...)
	if code != 0 || !strings.Contains(out, "cpu_manager_state: repaired") || !strings.Contains(stderr, "cannot be written") {
		t.Errorf("unwritable cache: exit %d; stdout:\n%s\nstderr:\n%s", code, out, stderr)
	}
}
