package systemd_test

import (
	"os"
	"strings"
	"testing"
)

const dropinPath = "../../deploy/systemd/kubelet.service.d/10-hotplugd-preflight.conf"

// verifyDropin runs `systemd-analyze verify` on a minimal kubelet.service
// with the drop-in beside it, and returns every problem it reports.
func verifyDropin(t *testing.T, dropin string) []string {
	t.Helper()
	kubelet := "[Unit]\nDescription=kubelet\n[Service]\nExecStart=" + installedAt + " kubelet\n[Install]\nWantedBy=multi-user.target\n"
	return verifyFiles(t, "kubelet.service", map[string]string{
		"kubelet.service": kubelet,
		"kubelet.service.d/10-hotplugd-preflight.conf": dropin,
	})
}

func readDropin(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(dropinPath)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func TestDropinVerify(t *testing.T) {
	if problems := verifyDropin(t, readDropin(t)); len(problems) > 0 {
		t.Errorf("systemd-analyze verify with %s:\n%s", dropinPath, strings.Join(problems, "\n"))
	}
	// The check sees the drop-in: a broken key in it is reported.
	broken := strings.Replace(readDropin(t), "ExecStartPre=", "ExecStartPrr=", 1)
	if problems := verifyDropin(t, broken); !strings.Contains(strings.Join(problems, "\n"), "Unknown key") {
		t.Errorf("a misspelled key in the drop-in was not reported: %v", problems)
	}
}

// TestDropinRunsPreflightStrictly: preflight runs before the kubelet, and
// its failure stops the kubelet's start (no "-" prefix that would hide it).
func TestDropinRunsPreflightStrictly(t *testing.T) {
	d := readDropin(t)
	var pre []string
	for line := range strings.Lines(d) {
		if strings.HasPrefix(line, "ExecStartPre=") {
			pre = append(pre, strings.TrimSpace(line))
		}
	}
	want := "ExecStartPre=" + installedAt + " preflight $HOTPLUGD_PREFLIGHT_ARGS -- " + kubeadmArgs(t)
	if len(pre) != 1 || pre[0] != want {
		t.Errorf("ExecStartPre lines %q, want exactly %q", pre, want)
	}
	// The environment files kubeadm's ExecStart reads, read here too.
	for line := range strings.Lines(readKubeadm(t)) {
		if strings.HasPrefix(line, "EnvironmentFile=") && !strings.Contains(d, line) {
			t.Errorf("the drop-in does not read kubeadm's %s", strings.TrimSpace(line))
		}
	}
	if !strings.Contains(d, "EnvironmentFile=-/etc/default/hotplugd") {
		t.Error("the drop-in does not read /etc/default/hotplugd")
	}
}

// readKubeadm is kubeadm's kubelet drop-in (testdata/10-kubeadm.conf).
func readKubeadm(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("testdata/10-kubeadm.conf")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

// kubeadmArgs is what kubeadm's ExecStart passes to the kubelet after its
// binary: preflight gets the same words after "--".
func kubeadmArgs(t *testing.T) string {
	t.Helper()
	for line := range strings.Lines(readKubeadm(t)) {
		if cmd, ok := strings.CutPrefix(strings.TrimSpace(line), "ExecStart="); ok && cmd != "" {
			_, args, _ := strings.Cut(cmd, " ")
			return args
		}
	}
	t.Fatal("no ExecStart in testdata/10-kubeadm.conf")
	return ""
}

// TestDropinWithKubeadm: the drop-in verifies beside kubeadm's drop-in.
func TestDropinWithKubeadm(t *testing.T) {
	kubelet := "[Unit]\nDescription=kubelet\n[Service]\nExecStart=" + installedAt + " kubelet\n[Install]\nWantedBy=multi-user.target\n"
	kubeadm := strings.ReplaceAll(readKubeadm(t), "/usr/bin/kubelet", installedAt)
	problems := verifyFiles(t, "kubelet.service", map[string]string{
		"kubelet.service":                              kubelet,
		"kubelet.service.d/10-kubeadm.conf":            kubeadm,
		"kubelet.service.d/10-hotplugd-preflight.conf": readDropin(t),
	})
	if len(problems) > 0 {
		t.Errorf("systemd-analyze verify with kubeadm's drop-in:\n%s", strings.Join(problems, "\n"))
	}
}
