package systemd_test

import (
	"bufio"
	"bytes"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const (
	unitPath    = "../../deploy/systemd/hotplugd.service"
	defaultPath = "../../deploy/systemd/hotplugd.default"
	installedAt = "/usr/local/bin/hotplugd"
	// unitsLoadStamp is written by every systemd-analyze run that loads
	// units (the manager records when it loaded them); removed afterwards
	// when it was not there before.
	unitsLoadStamp = "/run/systemd/systemd-units-load"
)

func readUnit(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(unitPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// analyze runs systemd-analyze with args and returns its combined output.
func analyze(t *testing.T, args ...string) (string, error) {
	t.Helper()
	bin, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skipf("skipping: systemd-analyze not found: %v", err)
	}
	if _, err := os.Lstat(unitsLoadStamp); errors.Is(err, os.ErrNotExist) {
		t.Cleanup(func() { os.Remove(unitsLoadStamp) })
	}
	cmd := exec.Command(bin, args...)
	cmd.Env = append(os.Environ(), "SYSTEMD_COLORS=0", "SYSTEMD_PAGER=")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// verify writes unit as hotplugd.service into a temporary directory and
// returns the problems `systemd-analyze verify` reports: a failed exit and
// every output line (verify exits 0 on many warnings, such as an unknown key
// or a value it cannot parse, so the output is what counts). The installed
// binary's path is replaced by this test binary's, since verify checks that
// ExecStart is executable and nothing is installed here.
func verify(t *testing.T, unit string) []string {
	t.Helper()
	return verifyFiles(t, "hotplugd.service", map[string]string{"hotplugd.service": unit})
}

// verifyFiles writes files (relative path -> content, the installed
// binary's path replaced by this test binary's) into a temporary directory
// on SYSTEMD_UNIT_PATH, so drop-ins beside a unit are loaded, runs
// `systemd-analyze verify` on the unit, and returns every problem it
// reports.
func verifyFiles(t *testing.T, unit string, files map[string]string) []string {
	t.Helper()
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	for name, content := range files {
		path := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		content = strings.ReplaceAll(content, installedAt+" ", self+" ")
		if err := os.WriteFile(path, []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	t.Setenv("SYSTEMD_UNIT_PATH", dir+":")
	out, err := analyze(t, "verify", filepath.Join(dir, unit))
	var problems []string
	if err != nil {
		problems = append(problems, "systemd-analyze verify: "+err.Error())
	}
	for line := range strings.Lines(out) {
		if line = strings.TrimSpace(line); line != "" {
			problems = append(problems, line)
		}
	}
	return problems
}

func TestUnitVerify(t *testing.T) {
	if problems := verify(t, readUnit(t)); len(problems) > 0 {
		t.Errorf("systemd-analyze verify %s:\n%s", unitPath, strings.Join(problems, "\n"))
	}
}

// TestUnitVerifyCatchesMistakes shows that verify, as run above, fails on the
// mistakes a unit file edit makes; otherwise TestUnitVerify proves nothing.
func TestUnitVerifyCatchesMistakes(t *testing.T) {
	tests := []struct {
		name      string
		old, new  string
		wantMatch string
	}{
		{"misspelled key", "WatchdogSec=30s", "WatchdogSecs=30s", "Unknown key"},
		{"bad value", "ProtectHome=yes", "ProtectHome=maybe", "Failed to parse"},
		{"unknown syscall group", "SystemCallFilter=@system-service", "SystemCallFilter=@system-servce", "Unknown system call group"},
		{"unknown address family", "RestrictAddressFamilies=AF_NETLINK", "RestrictAddressFamilies=AF_NETLNK", "Failed to parse address family"},
		// Not caught: verify silently drops an unknown capability name
		// (CAP_NET_ADMINN), so TestUnitHardening pins the exact set.
		{"missing binary", "ExecStart=" + installedAt, "ExecStart=/nonexistent/hotplugd", "is not executable"},
	}
	unit := readUnit(t)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if !strings.Contains(unit, tt.old) {
				t.Fatalf("the unit has no %q to break", tt.old)
			}
			problems := verify(t, strings.Replace(unit, tt.old, tt.new, 1))
			if !strings.Contains(strings.Join(problems, "\n"), tt.wantMatch) {
				t.Errorf("with %q, verify reported %q, want a line with %q", tt.new, problems, tt.wantMatch)
			}
		})
	}
}

// directives parses a unit file into section -> key -> values, in order
// (a key may repeat). Comments and blank lines are dropped; the unit has no
// line continuations.
func directives(t *testing.T, unit string) map[string]map[string][]string {
	t.Helper()
	d := map[string]map[string][]string{}
	var section string
	sc := bufio.NewScanner(strings.NewReader(unit))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "" || strings.HasPrefix(line, "#") || strings.HasPrefix(line, ";"):
		case strings.HasPrefix(line, "[") && strings.HasSuffix(line, "]"):
			section = line[1 : len(line)-1]
			d[section] = map[string][]string{}
		default:
			k, v, ok := strings.Cut(line, "=")
			if !ok || section == "" || strings.HasSuffix(line, `\`) {
				t.Fatalf("unit line %d: cannot parse %q", n, line)
			}
			d[section][k] = append(d[section][k], v)
		}
	}
	return d
}

// TestUnitHardening pins the directives the daemon's safety depends on.
// CapabilityBoundingSet in particular: verify does not report a misspelled
// capability, it drops it.
func TestUnitHardening(t *testing.T) {
	got := directives(t, readUnit(t))["Service"]
	want := map[string][]string{
		"Type":                    {"notify"},
		"NotifyAccess":            {"main"},
		"ExecStart":               {installedAt + " run --prune-on-removal=systemd/%n $HOTPLUGD_ARGS"},
		"EnvironmentFile":         {"-/etc/default/hotplugd"},
		"WatchdogSec":             {"30s"},
		"Restart":                 {"on-failure"},
		"RestartSec":              {"2s"},
		"CapabilityBoundingSet":   {"CAP_NET_ADMIN"},
		"NoNewPrivileges":         {"yes"},
		"ProtectSystem":           {"strict"},
		"ProtectKernelTunables":   {"yes"},
		"ProtectHome":             {"yes"},
		"PrivateTmp":              {"yes"},
		"ProtectKernelModules":    {"yes"},
		"ProtectControlGroups":    {"yes"},
		"RestrictAddressFamilies": {"AF_NETLINK AF_UNIX AF_INET AF_INET6"},
		"LockPersonality":         {"yes"},
		"MemoryDenyWriteExecute":  {"yes"},
		"RestrictRealtime":        {"yes"},
		"SystemCallArchitectures": {"native"},
	}
	subset := map[string][]string{}
	for k := range want {
		if v, ok := got[k]; ok {
			subset[k] = v
		}
	}
	if diff := cmp.Diff(want, subset); diff != "" {
		t.Errorf("unexpected [Service] directives (-want +got):\n%s", diff)
	}
	// The daemon writes nothing of the kubelet's (the repair runs in the
	// kubelet's start): no writable path besides its StateDirectory=.
	if v, ok := got["ReadWritePaths"]; ok {
		t.Errorf("[Service] sets ReadWritePaths=%s; the daemon writes only its StateDirectory", v)
	}
	// Root without extra capabilities; and uevents only reach the initial
	// network namespace.
	for _, k := range []string{"User", "DynamicUser", "AmbientCapabilities", "PrivateNetwork"} {
		if v, ok := got[k]; ok {
			t.Errorf("[Service] sets %s=%s; the daemon runs as root in the host network namespace", k, v)
		}
	}
}

// TestUnitExposure logs systemd's own score of the sandbox and fails when a
// change loosens it past "OK".
func TestUnitExposure(t *testing.T) {
	const threshold = 3.0
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "hotplugd.service")
	unit := strings.ReplaceAll(readUnit(t), installedAt+" ", self+" ")
	if err := os.WriteFile(path, []byte(unit), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := analyze(t, "security", "--offline=true", path)
	if err != nil {
		t.Fatalf("systemd-analyze security: %v\n%s", err, out)
	}
	m := regexp.MustCompile(`Overall exposure level for hotplugd\.service: ([0-9.]+)`).FindStringSubmatch(out)
	if m == nil {
		t.Fatalf("no exposure level in:\n%s", out)
	}
	level, err := strconv.ParseFloat(m[1], 64)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("systemd-analyze security: exposure %.1f", level)
	if level > threshold {
		t.Errorf("exposure %.1f > %.1f:\n%s", level, threshold, out)
	}
}

func TestDefaultFile(t *testing.T) {
	b, err := os.ReadFile(defaultPath)
	if err != nil {
		t.Fatal(err)
	}
	var args []string
	for line := range bytes.Lines(b) {
		if v, ok := bytes.CutPrefix(bytes.TrimSpace(line), []byte("HOTPLUGD_ARGS=")); ok {
			args = append(args, string(v))
		}
	}
	if diff := cmp.Diff([]string{`"--kubeconfig=/etc/kubernetes/kubelet.conf --remedy=report"`}, args); diff != "" {
		t.Errorf("unexpected HOTPLUGD_ARGS (-want +got):\n%s", diff)
	}
	for _, flag := range []string{
		"--standalone", "--sysfs-root", "--procfs-root", "--quiet-window DUR", "(500ms)",
		"--max-delay DUR", "(5s)", "--resync DUR", "0 disables (1m)", "--metrics-addr ADDR",
		"(127.0.0.1:9792)", "--log-format", "--log-level", "--kubeconfig FILE", "--node-name NAME", "--remedy MODE",
		"--settle DUR", "(3s)", "--remedy-interval DUR", "(10m)", "--kubelet-unit UNIT", "--kubelet-config FILE",
		"--min-memory-delta Q", "(100Mi)", "--dry-run",
	} {
		if !bytes.Contains(b, []byte(flag)) {
			t.Errorf("%s does not document %q", defaultPath, flag)
		}
	}
}
