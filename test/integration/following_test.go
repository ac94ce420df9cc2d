package integration

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/pause"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// fakeKubeletProcessMode makes the test binary a kubelet process: started
// as "kubelet --config FILE", it reports the fixture machine ($FAKE_SYSFS,
// $FAKE_PROCFS) with that configuration on its Node, unless $FAKE_MODE's
// file says "broken", then runs until it is killed, as a kubelet does.
const fakeKubeletProcessMode = "process"

func fakeKubeletProcess() int {
	sig := make(chan os.Signal, 1)
	signal.Notify(sig, syscall.SIGTERM, syscall.SIGINT)
	if err := reportFixture(); err != nil {
		fmt.Fprintln(os.Stderr, "fake kubelet:", err)
		return 1
	}
	fmt.Fprintf(os.Stderr, "fake kubelet ready pid %d\n", os.Getpid())
	<-sig
	return 0
}

func reportFixture() error {
	if mode, _ := os.ReadFile(os.Getenv("FAKE_MODE")); strings.TrimSpace(string(mode)) == "broken" {
		return nil
	}
	k, err := kubeletconfig.FromArgs(os.Args[1:], "/")
	if err != nil {
		return err
	}
	snap, err := topology.NewFS(os.Getenv("FAKE_SYSFS"), os.Getenv("FAKE_PROCFS")).CapacitySnapshot()
	if err != nil {
		return err
	}
	alloc, err := snap.Allocatable(k.Config)
	if err != nil {
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", os.Getenv("FAKE_KUBECONFIG"))
	if err != nil {
		return err
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	return patchStatus(c, os.Getenv("FAKE_NODE"), snap.Capacity(), alloc)
}

// processRig is a fixture machine with a kubelet process hotplugd finds in
// a procfs of its own (the fixture's files, the kubelet's /proc/<pid>
// linked in), stopped and started by scripts the test (as the operator)
// runs, and restarted by a script that is hotplugd's
// --kubelet-restart-command: stop, `hotplugd preflight` on the kubelet's
// command line (its failure never stops the start, as systemd's
// ExecStartPre=- in the drop-in), start.
type processRig struct {
	t                *testing.T
	dir, sys, proc   string
	cfg, mode, calls string
	pidfile          string
	// kubelet is the path the kubelet runs as (argv[0], absolute, as a
	// unit's ExecStart names it): a symlink to the test binary.
	kubelet              string
	start, stop, restart string
	c                    kubernetes.Interface
	node, kubeconfig     string
	budgetNS             string // its restart budget's namespace
	capacity             v1.ResourceList
}

func newProcessRig(t *testing.T, srv interface{ Client() kubernetes.Interface }, kubeconfig string, cpus int, cfgBody string, nodeCPUs string) *processRig {
	t.Helper()
	dir := t.TempDir()
	if err := fixturegen.OneNode(cpus, 8<<20, 0).WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	r := &processRig{t: t, dir: dir, sys: filepath.Join(dir, "sys"), proc: filepath.Join(dir, "proc"),
		cfg: filepath.Join(dir, "config.yaml"), mode: filepath.Join(dir, "mode"), calls: filepath.Join(dir, "calls"),
		pidfile: filepath.Join(dir, "kubelet.pid"), kubelet: filepath.Join(dir, "bin", "kubelet"), c: srv.Client(), kubeconfig: kubeconfig}
	// The uptime, for the kubelet's start time.
	if err := os.Symlink("/proc/uptime", filepath.Join(r.proc, "uptime")); err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Join(dir, "root"), 0o755); err != nil {
		t.Fatal(err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(r.kubelet), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(self, r.kubelet); err != nil {
		t.Fatal(err)
	}
	r.writeConfig(cfgBody)
	snap, err := topology.NewFS(r.sys, r.proc).CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	r.capacity = snap.Capacity()
	reported := withCPU(r.capacity, nodeCPUs)
	r.node = createNode(t, r.c, "follow", reported, reported)
	r.budgetNS = budgetNamespace(t, r.c, r.node)
	env := fmt.Sprintf("GORACE=%s %s=%s FAKE_MODE=%s FAKE_KUBECONFIG=%s FAKE_NODE=%s FAKE_SYSFS=%s FAKE_PROCFS=%s",
		shellQuote(crashHelperGorace()), fakeKubeletEnv, fakeKubeletProcessMode, r.mode, kubeconfig, r.node, r.sys, r.proc)
	// start and stop are idempotent: start leaves a running kubelet alone,
	// stop a stopped one. $1 says who runs them.
	r.start = filepath.Join(dir, "start.sh")
	r.stop = filepath.Join(dir, "stop.sh")
	r.restart = filepath.Join(dir, "restart.sh")
	writeScript(t, r.start, fmt.Sprintf(`p=$(cat %[1]s 2>/dev/null)
if [ -n "$p" ] && [ -s /proc/$p/cmdline ]; then exit 0; fi
echo "$1 start $(date +%%s%%N)" >> %[2]s
env %[3]s %[4]s --config %[5]s --root-dir %[6]s/root >> %[6]s/kubelet.log 2>&1 < /dev/null &
p=$!
echo $p > %[1]s
ln -sfn /proc/$p %[7]s/$p
`, r.pidfile, r.calls, env, r.kubelet, r.cfg, dir, r.proc))
	writeScript(t, r.stop, fmt.Sprintf(`echo "$1 stop $(date +%%s%%N)" >> %[2]s
p=$(cat %[1]s 2>/dev/null)
[ -n "$p" ] || exit 0
kill $p 2>/dev/null
while [ -s /proc/$p/cmdline ]; do sleep 0.02; done
rm -f %[3]s/$p %[1]s
`, r.pidfile, r.calls, r.proc))
	writeScript(t, r.restart, fmt.Sprintf(`echo "$1 restart $(date +%%s%%N)" >> %[1]s
%[2]s "$1"
status=0
%[3]s preflight --sysfs-root %[4]s --procfs-root %[5]s --kubelet-version %[6]s -- %[7]s --config %[8]s --root-dir %[9]s/root >> %[9]s/preflight.log 2>&1 || status=$?
echo "$1 preflight $(date +%%s%%N) $status" >> %[1]s
%[10]s "$1"
`, r.calls, r.stop, binary, r.sys, r.proc, fakeKubeletVersion, r.kubelet, r.cfg, dir, r.start))
	t.Cleanup(func() {
		if b, err := os.ReadFile(r.pidfile); err == nil {
			if pid, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && pid > 0 {
				syscall.Kill(pid, syscall.SIGKILL)
			}
		}
	})
	return r
}

func writeScript(t *testing.T, path, body string) {
	t.Helper()
	if err := os.WriteFile(path, []byte("#!/bin/bash\n"+body), 0o755); err != nil {
		t.Fatal(err)
	}
}

func (r *processRig) writeConfig(body string) {
	r.t.Helper()
	if err := os.WriteFile(r.cfg, []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nhealthzPort: 0\n"+body), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

func (r *processRig) setBroken(broken bool) {
	mode := "ok"
	if broken {
		mode = "broken"
	}
	if err := os.WriteFile(r.mode, []byte(mode), 0o644); err != nil {
		r.t.Fatal(err)
	}
}

// operator runs a script as the operator would (not through hotplugd);
// a start returns once the kubelet has read its mode and reported.
func (r *processRig) operator(script string) {
	r.t.Helper()
	if out, err := runScript(script, "operator"); err != nil {
		r.t.Fatalf("%s: %v\n%s", script, err, out)
	}
	if script != r.start {
		return
	}
	want := fmt.Sprintf("fake kubelet ready pid %d\n", r.pid())
	deadline := time.Now().Add(10 * time.Second)
	for {
		b, _ := os.ReadFile(filepath.Join(r.dir, "kubelet.log"))
		if strings.Contains(string(b), want) {
			return
		}
		if time.Now().After(deadline) {
			r.t.Fatalf("the fake kubelet did not start; its log:\n%s", b)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func runScript(script, who string) ([]byte, error) {
	cmd := exec.Command("bash", script, who)
	return cmd.CombinedOutput()
}

// pid is the running kubelet's PID (0: none).
func (r *processRig) pid() int {
	b, _ := os.ReadFile(r.pidfile)
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

// hotplugdCalls are the steps of the restarts hotplugd asked for:
// restart, stop, preflight (with its exit status: "preflight=0"), start.
func (r *processRig) hotplugdCalls() []string {
	b, _ := os.ReadFile(r.calls)
	var out []string
	for _, line := range strings.Split(strings.TrimSpace(string(b)), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) == 3 && f[0] == "hotplugd":
			out = append(out, f[1])
		case len(f) == 4 && f[0] == "hotplugd" && f[1] == "preflight":
			out = append(out, f[1]+"="+f[3])
		}
	}
	return out
}

// oneRestart is hotplugdCalls for one restart through the restart command.
const oneRestart = "restart,stop,preflight=0,start"

// daemon starts hotplugd for the rig, with extra flags.
func (r *processRig) daemon(stateDir string, extra ...string) *daemonProc {
	r.t.Helper()
	args := append([]string{"--node-name", r.node, "--kubeconfig", r.kubeconfig,
		"--sysfs-root", r.sys, "--procfs-root", r.proc, "--kubelet-version", "v1.36.3",
		"--remedy", "restart-kubelet", "--settle", "300ms", "--remedy-interval", "1s", "--remedy-timeout", "3s",
		"--kubelet-poll", "200ms", "--kubelet-grace", "2s", "--state-dir", stateDir,
		"--kubelet-restart-command", r.restart + " hotplugd", "--restart-budget-namespace", r.budgetNS}, extra...)
	return startClusterDaemon(r.t, args...)
}

// waitFound waits for hotplugd to log the kubelet with pid as found.
func waitFound(t *testing.T, d *daemonProc, pid int, limits bool) {
	t.Helper()
	d.WaitFor(10*time.Second, func(e logEntry) bool {
		got, _ := e.Fields["pid"].(float64)
		want := "kubelet found"
		if limits {
			want = "kubelet found, with limits"
		}
		return e.Msg == want && int(got) == pid
	})
}

func (r *processRig) nodeStatus() *v1.Node {
	r.t.Helper()
	n, err := r.c.CoreV1().Nodes().Get(context.Background(), r.node, metav1.GetOptions{})
	if err != nil {
		r.t.Fatal(err)
	}
	return n
}

// TestIntegrationFollowsKubeletRestart: an operator raises systemReserved
// and restarts the kubelet: hotplugd follows the new kubelet and its
// configuration; no drift, no restart of its own (issue 11, point 2). The
// hotplugd that discovered the kubelet once predicted the old allocatable
// and restarted the kubelet every --remedy-interval.
func TestIntegrationFollowsKubeletRestart(t *testing.T) {
	srv := sharedAPIServer(t)
	kc := kubeconfigFor(t, srv)
	r := newProcessRig(t, srv, kc, 4, "systemReserved:\n  cpu: 100m\n", "4")
	r.operator(r.start)
	waitNodeCPU(t, r, "3900m")
	d := r.daemon(t.TempDir())
	waitFound(t, d, r.pid(), false)
	waitCondition(t, r.c, r.node, v1.ConditionFalse, 10*time.Second)

	// The operator's change: the file first (the running kubelet does not
	// read it), then the restart.
	r.writeConfig("systemReserved:\n  cpu: 500m\n")
	waitFound(t, d, r.pid(), true)
	old := r.pid()
	r.operator(r.stop)
	// The kernel told of the exit (a pidfd): hotplugd polled nothing while
	// the kubelet ran.
	d.WaitFor(10*time.Second, func(e logEntry) bool {
		pid, _ := e.Fields["pid"].(float64)
		return e.Msg == "the kubelet process exited; polling for the next" && int(pid) == old
	})
	r.operator(r.start)
	waitNodeCPU(t, r, "3500m")
	waitFound(t, d, r.pid(), false)

	// Given time to act (settle, interval, grace), hotplugd does nothing.
	time.Sleep(4 * time.Second)
	if calls := r.hotplugdCalls(); len(calls) != 0 {
		t.Errorf("hotplugd restarted the kubelet: %v", calls)
	}
	cond, node := condition(t, r.c, r.node)
	if cond == nil || cond.Status != v1.ConditionFalse {
		t.Errorf("condition %+v, want False", cond)
	}
	if ev := events(t, r.c, r.node, nodepatch.ReasonCapacityDrift); len(ev) != 0 {
		t.Errorf("%d CapacityDrift events, want none: %s", len(ev), ev[0].Message)
	}
	if got := node.Annotations[nodepatch.AnnotationAllocatable]; !strings.Contains(got, "cpu=3500m") {
		t.Errorf("hotplugd predicts allocatable %q, want cpu=3500m (the new systemReserved)", got)
	}
}

// waitNodeCPU waits for the Node's allocatable cpu.
func waitNodeCPU(t *testing.T, r *processRig, cpu string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		n := r.nodeStatus()
		if q := n.Status.Allocatable[v1.ResourceCPU]; q.String() == cpu {
			return
		}
		if time.Now().After(deadline) {
			b, _ := os.ReadFile(filepath.Join(r.dir, "kubelet.log"))
			t.Fatalf("Node allocatable cpu %v, want %s; fake kubelet log:\n%s", n.Status.Allocatable.Cpu(), cpu, b)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// TestIntegrationKubeletAfterHotplugd: hotplugd started before any kubelet
// runs predicts capacity only and keeps looking; once the kubelet runs it
// predicts its allocatable and remedies a drift (issue 11, point 2: no
// permanent downgrade).
func TestIntegrationKubeletAfterHotplugd(t *testing.T) {
	srv := sharedAPIServer(t)
	kc := kubeconfigFor(t, srv)
	r := newProcessRig(t, srv, kc, 4, "kubeReserved:\n  cpu: 200m\n", "4")
	d := r.daemon(t.TempDir())
	d.WaitFor(10*time.Second, func(e logEntry) bool { return strings.HasPrefix(e.Msg, "no kubelet") })
	waitCondition(t, r.c, r.node, v1.ConditionFalse, 10*time.Second)
	if got := r.nodeStatus().Annotations[nodepatch.AnnotationAllocatable]; got != "" {
		t.Errorf("allocatable predicted without a kubelet: %q", got)
	}

	r.operator(r.start)
	waitFound(t, d, r.pid(), false)
	waitNodeCPU(t, r, "3800m")
	// Now the kubelet's last report goes stale (as after a change it did
	// not see): hotplugd compares allocatable and restarts it.
	first := r.pid()
	setStatus(t, r.c, r.node, r.capacity, withCPU(r.capacity, "3"))
	d.WaitFor(20*time.Second, func(e logEntry) bool { return e.Msg == "remedy done" && e.Str("outcome") == "remediated" })
	if got := strings.Join(r.hotplugdCalls(), ","); got != oneRestart {
		t.Errorf("hotplugd's kubelet calls %q, want one restart through the restart command (%s)", got, oneRestart)
	}
	if r.pid() == first {
		t.Error("the kubelet process did not change")
	}
	waitCondition(t, r.c, r.node, v1.ConditionFalse, 10*time.Second)
}

// TestIntegrationFailedRemedyNotRepeated: a remedy that failed (the
// restarted kubelet never reports the machine) is one restart, with
// nothing rolled back: the new kubelet is left running, to its supervisor.
// It is not attempted again for the same drift by three hotplugds started
// after it on the same journal (issue 11, point 4: a crash-looping
// hotplugd restarts nothing).
func TestIntegrationFailedRemedyNotRepeated(t *testing.T) {
	srv := sharedAPIServer(t)
	kc := kubeconfigFor(t, srv)
	r := newProcessRig(t, srv, kc, 4, "", "8") // the Node says 8 CPUs, the machine has 4
	r.setBroken(true)
	r.operator(r.start)
	first := r.pid()
	state := t.TempDir()
	d := r.daemon(state)
	failed := d.WaitFor(20*time.Second, func(e logEntry) bool { return e.Msg == "remedy failed" })
	if got := strings.Join(r.hotplugdCalls(), ","); got != oneRestart {
		t.Fatalf("hotplugd's kubelet calls %q, want one restart (%s) and no rollback", got, oneRestart)
	}
	if !strings.Contains(failed.Str("error"), "the Node still reports") {
		t.Errorf("remedy failed with %q, want the Node still reporting the old capacity", failed.Str("error"))
	}
	if p := r.pid(); p == first || !processRuns(p) {
		t.Errorf("after the failed remedy the kubelet is pid %d (running %v), want the restarted one (not %d) left running", p, processRuns(p), first)
	}
	d.Stop()
	for i := range 3 {
		d := r.daemon(state)
		d.WaitFor(10*time.Second, func(e logEntry) bool {
			return e.Msg == "remedy plan" && strings.Contains(e.Str("plan"), "not repeated until one of them changes")
		})
		time.Sleep(2 * time.Second) // settle, interval and grace over
		if got := strings.Join(r.hotplugdCalls(), ","); got != oneRestart {
			t.Fatalf("after hotplugd's restart %d: kubelet calls %q, want still the one restart", i+1, got)
		}
		d.Stop()
	}
	// A change of the kubelet's configuration (the operator's restart
	// still leaves the Node as it was) allows one more attempt, which works.
	r.writeConfig("kubeReserved:\n  cpu: 100m\n")
	r.operator(r.stop)
	r.operator(r.start)
	r.setBroken(false)
	d = r.daemon(state)
	d.WaitFor(20*time.Second, func(e logEntry) bool { return e.Msg == "remedy done" && e.Str("outcome") == "remediated" })
}

// TestIntegrationRetryAnnotation: a failed remedy stands for its drift
// until a person annotates the Node with a new hotplugd.io/retry: the
// running hotplugd, told by its watch of the real API server, takes it
// into its journal and tries once more (which works); the same value, seen
// again by a restarted hotplugd, is no second retry.
func TestIntegrationRetryAnnotation(t *testing.T) {
	srv := sharedAPIServer(t)
	kc := kubeconfigFor(t, srv)
	r := newProcessRig(t, srv, kc, 4, "", "8")
	r.setBroken(true)
	r.operator(r.start)
	state := t.TempDir()
	d := r.daemon(state)
	d.WaitFor(20*time.Second, func(e logEntry) bool { return e.Msg == "remedy failed" })
	r.setBroken(false)
	b := []byte(`{"metadata":{"annotations":{"` + nodepatch.AnnotationRetry + `":"after-the-fix"}}}`)
	if _, err := r.c.CoreV1().Nodes().Patch(context.Background(), r.node, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	d.WaitFor(20*time.Second, func(e logEntry) bool { return e.Msg == "remedy done" && e.Str("outcome") == "remediated" })
	if got := strings.Join(r.hotplugdCalls(), ","); got != oneRestart+","+oneRestart {
		t.Errorf("kubelet calls %q, want two restarts: the failed one and the retry", got)
	}
	d.Stop()
	// A retry is taken before the decision it changes is logged: once the
	// restarted hotplugd logged its plan, it has or has not taken it.
	d = r.daemon(state)
	d.WaitFor(10*time.Second, func(e logEntry) bool { return e.Msg == "remedy plan" })
	for _, e := range d.Since(0) {
		if strings.HasPrefix(e.Msg, "retry asked on the Node") {
			t.Errorf("a restarted hotplugd took the same retry again: %+v", e)
		}
	}
}

// TestIntegrationClusterPause: while the annotation hotplugd.io/pause is
// on the DaemonSet --pause-daemonset names (the real API server, one
// watch of that object), a drift is reported and the kubelet is not
// restarted, and hotplugd's plan says why; once it is removed, the
// remedy goes ahead.
func TestIntegrationClusterPause(t *testing.T) {
	srv := sharedAPIServer(t)
	c := srv.Client()
	ctx := context.Background()
	ns := fmt.Sprintf("pause-%d", os.Getpid())
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })
	ds := createDaemonSet(t, c, ns, "hotplugd")
	annotate := func(value string) {
		t.Helper()
		v := "null"
		if value != "" {
			v = `"` + value + `"`
		}
		b := []byte(`{"metadata":{"annotations":{"` + pause.Annotation + `":` + v + `}}}`)
		if _, err := c.AppsV1().DaemonSets(ns).Patch(ctx, ds, types.MergePatchType, b, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	annotate("node pool upgrade")

	kc := kubeconfigFor(t, srv)
	r := newProcessRig(t, srv, kc, 4, "", "8")
	r.setBroken(true) // the running kubelet's Node stays as it was (8 CPUs)
	r.operator(r.start)
	r.setBroken(false) // a restarted one reports the machine
	d := r.daemon(t.TempDir(), "--pause-daemonset", ns+"/"+ds)
	d.WaitFor(20*time.Second, func(e logEntry) bool {
		return e.Msg == "remedy plan" && strings.Contains(e.Str("plan"), "remedies are paused cluster-wide") && strings.Contains(e.Str("plan"), "node pool upgrade")
	})
	waitCondition(t, c, r.node, v1.ConditionTrue, 10*time.Second)
	if got := r.hotplugdCalls(); len(got) != 0 {
		t.Fatalf("kubelet calls %q while paused, want none", got)
	}
	annotate("")
	d.WaitFor(20*time.Second, func(e logEntry) bool { return e.Msg == "remedy done" && e.Str("outcome") == "remediated" })
	if got := strings.Join(r.hotplugdCalls(), ","); got != oneRestart {
		t.Errorf("kubelet calls %q after the pause, want one restart", got)
	}
}

// TestIntegrationRefusedConfigurationNoRestart: the machine lost the CPUs
// reservedSystemCPUs names: a restarted kubelet would refuse to start, so
// hotplugd does not restart it and says why in one Warning Event, in the
// kubelet's words (issue 11, point 3).
func TestIntegrationRefusedConfigurationNoRestart(t *testing.T) {
	srv := sharedAPIServer(t)
	kc := kubeconfigFor(t, srv)
	// The kubelet started on 8 CPUs with CPUs 6-7 reserved; 4-7 are gone.
	r := newProcessRig(t, srv, kc, 4, "reservedSystemCPUs: \"6-7\"\n", "8")
	r.setBroken(true) // the running kubelet's Node stays as it was
	r.operator(r.start)
	state := t.TempDir()
	d := r.daemon(state)
	ev := waitEvents(t, r.c, r.node, nodepatch.ReasonKubeletWouldRefuse, 1, 20*time.Second)
	if !strings.Contains(ev[0].Message, "not a subset of online-cpus") {
		t.Errorf("event %q does not say it in the kubelet's words", ev[0].Message)
	}
	time.Sleep(3 * time.Second)
	d.Stop()
	r.daemon(state) // and not after a restart of hotplugd either
	time.Sleep(3 * time.Second)
	if calls := r.hotplugdCalls(); len(calls) != 0 {
		t.Errorf("hotplugd restarted the kubelet: %v", calls)
	}
	if ev := events(t, r.c, r.node, nodepatch.ReasonKubeletWouldRefuse); len(ev) != 1 || ev[0].Count > 1 {
		t.Errorf("KubeletWouldRefuse events %d (count %d), want one", len(ev), ev[0].Count)
	}
	cond, _ := condition(t, r.c, r.node)
	if cond == nil || cond.Status != v1.ConditionTrue {
		t.Errorf("condition %+v, want True", cond)
	}
}

// processRuns says whether pid is a running process (not a zombie).
func processRuns(pid int) bool {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/cmdline", pid))
	return pid > 0 && err == nil && len(b) > 0
}

// TestIntegrationStagedConfigWithheld: the kubelet's configuration file was
// changed after the kubelet started (a change staged for after a drain);
// then the machine lost CPUs. A restart would apply the staged change, so
// hotplugd withholds it (issue 19, point 2): no restart, one Warning
// Event RestartWithheld saying why, the journal's outcome withheld, and a
// hotplugd started again adds neither a restart nor an Event.
func TestIntegrationStagedConfigWithheld(t *testing.T) {
	srv := sharedAPIServer(t)
	kc := kubeconfigFor(t, srv)
	r := newProcessRig(t, srv, kc, 4, "kubeReserved:\n  cpu: 200m\n", "8") // the Node says 8 CPUs, the machine has 4
	r.setBroken(true)                                                      // the running kubelet's Node stays as it was
	r.operator(r.start)
	time.Sleep(100 * time.Millisecond) // the change comes after the kubelet's start, by more than a clock tick
	r.writeConfig("kubeReserved:\n  cpu: 500m\n")
	state := t.TempDir()
	d := r.daemon(state)
	withheld := d.WaitFor(20*time.Second, func(e logEntry) bool { return isOutcome(e) })
	if withheld.Str("outcome") != "withheld" || !strings.Contains(withheld.Str("error"), "configuration changed after the kubelet started") {
		t.Errorf("remedy ended %s (%s), want withheld: the configuration changed after the kubelet started", withheld.Str("outcome"), withheld.Str("error"))
	}
	ev := waitEvents(t, r.c, r.node, nodepatch.ReasonRestartWithheld, 1, 10*time.Second)
	if ev[0].Type != v1.EventTypeWarning || !strings.Contains(ev[0].Message, "the kubelet was not restarted") || !strings.Contains(ev[0].Message, r.cfg) {
		t.Errorf("RestartWithheld event %s %q, want a Warning naming %s", ev[0].Type, ev[0].Message, r.cfg)
	}
	d.Stop()
	d = r.daemon(state)
	d.WaitFor(10*time.Second, func(e logEntry) bool {
		return e.Msg == "remedy plan" && strings.Contains(e.Str("plan"), "ended withheld: not repeated until one of them changes")
	})
	time.Sleep(2 * time.Second) // settle, interval and grace over
	if calls := r.hotplugdCalls(); len(calls) != 0 {
		t.Errorf("hotplugd restarted the kubelet: %v", calls)
	}
	if ev := events(t, r.c, r.node, nodepatch.ReasonRestartWithheld); len(ev) != 1 || ev[0].Count > 1 {
		t.Errorf("RestartWithheld events %d (count %d), want one", len(ev), ev[0].Count)
	}
}
