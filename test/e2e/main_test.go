//go:build e2e

package e2e

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/kubeapitest"
)

// nodeName is the Node the test kubelet registers.
const nodeName = "e2e-node"

// suite is what TestMain starts once for all scenarios.
type suite struct {
	dir        string // temporary, removed at the end
	hotplugd   string // the binary built for this run
	kubeletBin string
	api        *kubeapitest.Server
	kubeconfig string // admin token, for the kubelet and hotplugd
	containerd *containerd
	// noStart, once it exists, makes the kubelet start script refuse:
	// created when the run is cut short.
	noStart string
}

var (
	env *suite
	// skipReason, when set, makes every scenario skip with it.
	skipReason string
)

// setup returns the suite, or skips t with the reason it could not start.
func setup(t *testing.T) *suite {
	t.Helper()
	if skipReason != "" {
		t.Skip("SKIPPED: " + skipReason)
	}
	return env
}

func TestMain(m *testing.M) {
	flag.Parse()
	os.Exit(run(m))
}

func run(m *testing.M) int {
	stopSignals := handleSignals()
	defer stopSignals()
	stopWatchdog := timeoutWatchdog()
	defer stopWatchdog()

	dir, err := os.MkdirTemp("", "hotplugd-e2e-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	// Everything of the run is under dir, the kubelets' directories too:
	// removed last, also when the run is cut short.
	emergency.push("remove "+dir, func() { os.RemoveAll(dir) })
	s := &suite{dir: dir, noStart: filepath.Join(dir, "no-more-kubelet-starts")}
	if err := s.start(); err != nil {
		var skip skipError
		if !errors.As(err, &skip) {
			fmt.Fprintln(os.Stderr, "e2e:", err)
			emergency.run()
			return 1
		}
		skipReason = err.Error()
		fmt.Println("e2e: SKIPPED:", skipReason)
	}
	env = s
	code := m.Run()
	emergency.run() // what a test left (nothing, when its cleanups ran)
	if err := finalMachineCheck(); err != nil {
		fmt.Fprintln(os.Stderr, "e2e:", err)
		code = 1
	}
	results.print(os.Stdout)
	return code
}

// skipError is a reason to skip every scenario.
type skipError struct{ reason string }

func (e skipError) Error() string { return e.reason }

// start checks what the scenarios need, builds hotplugd, and starts
// containerd, etcd and kube-apiserver.
func (s *suite) start() error {
	if os.Geteuid() != 0 {
		return skipError{"needs root (a kubelet changes sysctls, cgroups and mounts; the scenarios offline cpu1)"}
	}
	for _, p := range []string{"containerd", "runc"} {
		if _, err := exec.LookPath(p); err != nil {
			return skipError{fmt.Sprintf("%s is not installed: apt-get install containerd runc (Debian packages containerd and runc)", p)}
		}
	}
	binDir, err := kubeapitest.BinDir()
	if err != nil {
		return skipError{fmt.Sprintf("no kube binaries: %v", err)}
	}
	s.kubeletBin = binDir + "/kubelet"
	if pid, ok := runningKubelet(); ok {
		return skipError{fmt.Sprintf("a kubelet already runs on this machine (pid %d): the scenarios would change its host state", pid)}
	}
	if _, err := os.Stat(devicePluginSocket); err == nil {
		return skipError{devicePluginSocket + " exists: another kubelet owns this machine's device plugin socket"}
	}
	if s.hotplugd, err = daemontest.Build(s.dir); err != nil {
		return err
	}
	// The machine as it is before anything runs: restored on SIGINT and
	// checked at the end.
	if err := recordMachine(); err != nil {
		return err
	}
	if s.containerd, err = startContainerd(s.dir + "/containerd"); err != nil {
		return err
	}
	emergency.push("stop containerd", s.containerd.stop)
	if s.api, err = kubeapitest.Start(kubeapitest.Options{KubeletHosts: []string{nodeName}}); err != nil {
		return fmt.Errorf("starting kube-apiserver and etcd: %w", err)
	}
	emergency.push("stop kube-apiserver and etcd", s.api.Stop)
	// The restart budget's Leases (hotplugd run --restart-budget, 1 by
	// default) of the hotplugd processes the tests run on the host: a
	// namespace of their own, which the DaemonSet tests' uninstall of
	// hotplugd-system does not take away.
	if _, err := s.api.Client().CoreV1().Namespaces().Create(context.Background(),
		&v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: budgetNamespace}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("creating namespace %s: %w", budgetNamespace, err)
	}
	s.kubeconfig = s.dir + "/kubeconfig"
	return s.api.WriteKubeconfig(s.kubeconfig, s.api.AdminToken)
}
