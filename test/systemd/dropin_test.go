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

// TestDropinNeverBlocks (issue 19): preflight runs before the kubelet
// with systemd's "-" prefix, so that no exit status, crash or missing
// binary of preflight keeps the kubelet from starting, and it reads the
// kubelet's command line from the unit itself (%n), for any layout; the
// drop-in adds no environment file of the kubelet's (it would change the
// kubelet's own environment) beside hotplugd's own.
func TestDropinNeverBlocks(t *testing.T) {
	d := readDropin(t)
	var pre, envFiles []string
	for line := range strings.Lines(d) {
		switch line = strings.TrimSpace(line); {
		case strings.HasPrefix(line, "ExecStartPre="):
			pre = append(pre, line)
		case strings.HasPrefix(line, "EnvironmentFile="):
			envFiles = append(envFiles, line)
		}
	}
	want := "ExecStartPre=-" + installedAt + " preflight --kubelet-unit=%n --version-cache=/var/lib/hotplugd/kubelet-version.json $HOTPLUGD_PREFLIGHT_ARGS"
	if len(pre) != 1 || pre[0] != want {
		t.Errorf("ExecStartPre lines %q, want exactly %q", pre, want)
	}
	if len(envFiles) != 1 || envFiles[0] != "EnvironmentFile=-/etc/default/hotplugd" {
		t.Errorf("EnvironmentFile lines %q, want only -/etc/default/hotplugd", envFiles)
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
