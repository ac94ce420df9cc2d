package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/spf13/pflag"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

const fixtures = "../../pkg/topology/testdata/fixtures"

// fixtureRoot unpacks a fixture archive into a temporary directory, on
// tmpfs when the machine has /dev/shm (the large fixture has 19,000 files).
func fixtureRoot(t *testing.T, name string) string {
	t.Helper()
	base := ""
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		base = "/dev/shm"
	}
	dir, err := os.MkdirTemp(base, "hotplugd-cmd-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	if err := fixturegen.Extract(filepath.Join(fixtures, name+".tar.gz"), dir); err != nil {
		t.Fatal(err)
	}
	return dir
}

func runCmd(args ...string) (code int, stdout, stderr string) {
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// TestSnapshotGolden runs `hotplugd snapshot -o wide` on every fixture and
// diffs the table with testdata/<fixture>.golden.
func TestSnapshotGolden(t *testing.T) {
	paths, err := filepath.Glob(filepath.Join(fixtures, "*.tar.gz"))
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in %s: %v", fixtures, err)
	}
	for _, p := range paths {
		name := strings.TrimSuffix(filepath.Base(p), ".tar.gz")
		t.Run(name, func(t *testing.T) {
			root := fixtureRoot(t, name)
			code, got, stderr := runCmd("snapshot", "--sysfs-root", root+"/sys", "--procfs-root", root+"/proc", "-o", "wide")
			if code != 0 {
				t.Fatalf("exit %d, stderr: %s", code, stderr)
			}
			golden := filepath.Join("testdata", name+".golden")
			if *update {
				if err := os.WriteFile(golden, []byte(got), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./cmd/hotplugd -update to create it)", err)
			}
			if diff := cmp.Diff(string(want), got); diff != "" {
				t.Errorf("unexpected output (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSnapshotJSON(t *testing.T) {
	root := fixtureRoot(t, "dual-socket-smt2")
	cfg := filepath.Join(t.TempDir(), "kubelet.yaml")
	if err := os.WriteFile(cfg, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nsystemReserved: {cpu: '1', memory: 1Gi}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runCmd("snapshot", "--sysfs-root", root+"/sys", "--procfs-root", root+"/proc", "--kubelet-config", cfg, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d, stderr: %s", code, stderr)
	}
	var got struct {
		Capacity    map[string]string `json:"capacity"`
		Allocatable map[string]string `json:"allocatable"`
		NUMANodes   []struct {
			ID   int    `json:"id"`
			CPUs string `json:"cpus"`
		} `json:"numaNodes"`
		CPUs struct {
			Online string `json:"online"`
			List   []struct {
				ID, Package, Core, Node int
			} `json:"list"`
		} `json:"cpus"`
	}
	if err := json.Unmarshal([]byte(out), &got); err != nil {
		t.Fatalf("output is not JSON: %v\n%s", err, out)
	}
	want := map[string]string{"cpu": "16", "memory": "127936Mi", "hugepages-2Mi": "1536Mi", "hugepages-1Gi": "6Gi"}
	if diff := cmp.Diff(want, got.Capacity); diff != "" {
		t.Errorf("capacity (-want +got):\n%s", diff)
	}
	// 127936Mi - 1Gi system - 100Mi eviction - 1536Mi - 6Gi
	wantAlloc := map[string]string{"cpu": "15", "memory": "119132Mi", "hugepages-2Mi": "1536Mi", "hugepages-1Gi": "6Gi"}
	if diff := cmp.Diff(wantAlloc, got.Allocatable); diff != "" {
		t.Errorf("allocatable (-want +got):\n%s", diff)
	}
	if len(got.NUMANodes) != 2 || got.NUMANodes[1].CPUs != "4-7,12-15" {
		t.Errorf("numaNodes = %+v, want node 1 with CPUs 4-7,12-15", got.NUMANodes)
	}
	if got.CPUs.Online != "0-15" || len(got.CPUs.List) != 16 || got.CPUs.List[12].Package != 1 || got.CPUs.List[12].Node != 1 {
		t.Errorf("cpus = %+v", got.CPUs)
	}
}

func TestCommandErrors(t *testing.T) {
	tests := []struct {
		name       string
		args       []string
		wantCode   int
		wantStderr string
	}{
		{"no command", nil, 2, "Usage:"},
		{"unknown command", []string{"frobnicate"}, 2, `unknown command "frobnicate"`},
		{"bad output", []string{"snapshot", "-o", "yaml"}, 2, `--output must be table, wide or json, not "yaml"`},
		{"unknown flag", []string{"snapshot", "--nope"}, 2, "unknown flag: --nope"},
		{"extra argument", []string{"snapshot", "extra"}, 2, "unexpected arguments"},
		{"missing sysfs", []string{"snapshot", "--sysfs-root", "/nonexistent"}, 1, "hotplugd snapshot: topology: read /nonexistent/devices/system/cpu: no such file or directory"},
		{"missing kubelet config", []string{"snapshot", "--kubelet-config", "/nonexistent.yaml"}, 1, "kubeletconfig: read /nonexistent.yaml"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			code, stdout, stderr := runCmd(tt.args...)
			if code != tt.wantCode {
				t.Errorf("exit code = %d, want %d", code, tt.wantCode)
			}
			if !strings.Contains(stderr, tt.wantStderr) {
				t.Errorf("stderr = %q, want it to contain %q", stderr, tt.wantStderr)
			}
			if stdout != "" {
				t.Errorf("stdout = %q, want nothing on error", stdout)
			}
		})
	}
}

func TestHelp(t *testing.T) {
	code, out, _ := runCmd("--help")
	if code != 0 || !strings.Contains(out, "snapshot") {
		t.Errorf("--help: exit %d, output %q", code, out)
	}
	code, _, stderr := runCmd("snapshot", "--help")
	for _, flag := range []string{"--sysfs-root", "--procfs-root", "--kubelet-config", "--output"} {
		if !strings.Contains(stderr, flag) {
			t.Errorf("snapshot --help does not mention %s:\n%s", flag, stderr)
		}
	}
	if code != 0 {
		t.Errorf("snapshot --help exit code = %d, want 0", code)
	}
}

func TestSnapshotOptionsValidate(t *testing.T) {
	tests := []struct {
		o       snapshotOptions
		wantErr bool
	}{
		{snapshotOptions{SysfsRoot: "/sys", ProcfsRoot: "/proc", Output: "table"}, false},
		{snapshotOptions{SysfsRoot: "/sys", ProcfsRoot: "/proc", Output: "json"}, false},
		{snapshotOptions{SysfsRoot: "/sys", ProcfsRoot: "/proc", Output: "xml"}, true},
		{snapshotOptions{SysfsRoot: "", ProcfsRoot: "/proc", Output: "table"}, true},
	}
	for _, tt := range tests {
		if err := tt.o.Validate(); (err != nil) != tt.wantErr {
			t.Errorf("Validate(%+v) = %v, wantErr %v", tt.o, err, tt.wantErr)
		}
	}
}

// TestFlagsFromEnvironment: HOTPLUGD_<FLAG> sets a flag the command line
// does not give; the command line wins; a bad value names its variable;
// other HOTPLUGD_ variables (the unit's HOTPLUGD_ARGS) are not flags.
func TestFlagsFromEnvironment(t *testing.T) {
	t.Setenv("HOTPLUGD_REMEDY", "restart-kubelet")
	t.Setenv("HOTPLUGD_DRY_RUN", "true")
	t.Setenv("HOTPLUGD_KUBELET_ROOT_DIR", "/from/env")
	t.Setenv("HOTPLUGD_HEARTBEAT_INTERVAL", "2m")
	t.Setenv("HOTPLUGD_ARGS", "--not-a-flag")
	var o runOptions
	if _, err := parseFlagSet("run", "%s", &o, []string{"--kubelet-root-dir", "/from/flag"}, io.Discard, false); err != nil {
		t.Fatal(err)
	}
	if o.Remedy != "restart-kubelet" || !o.DryRun || o.Heartbeat != 2*time.Minute || o.KubeletRootDir != "/from/flag" {
		t.Errorf("remedy %q, dry-run %v, heartbeat %v, kubelet-root-dir %q; want restart-kubelet, true, 2m from the environment and /from/flag from the command line",
			o.Remedy, o.DryRun, o.Heartbeat, o.KubeletRootDir)
	}
	t.Setenv("HOTPLUGD_SETTLE", "soon")
	_, err := parseFlagSet("run", "%s", &runOptions{}, nil, io.Discard, false)
	if err == nil || !strings.Contains(err.Error(), "$HOTPLUGD_SETTLE (--settle)") {
		t.Errorf("a bad value: %v, want an error naming $HOTPLUGD_SETTLE", err)
	}
}

// TestEnvironmentNames: every flag of every command has its own variable,
// none of them a variable hotplugd's files use for something else.
func TestEnvironmentNames(t *testing.T) {
	notFlags := map[string]bool{"HOTPLUGD_ARGS": true, "HOTPLUGD_PREFLIGHT_ARGS": true}
	for name, o := range map[string]options{"run": &runOptions{}, "preflight": &preflightOptions{}, "snapshot": &snapshotOptions{}, "prune": &pruneOptions{}, "status": &statusOptions{}} {
		fs := pflag.NewFlagSet(name, pflag.ContinueOnError)
		o.AddFlags(fs)
		seen := map[string]string{}
		fs.VisitAll(func(f *pflag.Flag) {
			env := EnvName(f.Name)
			if other, ok := seen[env]; ok {
				t.Errorf("%s: --%s and --%s are both %s", name, f.Name, other, env)
			}
			seen[env] = f.Name
			if notFlags[env] {
				t.Errorf("%s: --%s would be set by %s, which is not a flag", name, f.Name, env)
			}
		})
	}
}
