//go:build e2e

package e2e

import (
	"bufio"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hotplugd/hotplugd/internal/deploytest"
	"github.com/hotplugd/hotplugd/internal/testimage"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// The DaemonSet's namespace and pod label (deploy/kubernetes).
const (
	dsNamespace = deploytest.Namespace
	dsName      = deploytest.Name
	// dsMetrics is where the pod serves /metrics (hostNetwork, loopback).
	dsMetrics = "http://127.0.0.1:9792/metrics"
)

// daemonPods lists the DaemonSet's pods.
func daemonPods(t *testing.T, s *suite) []v1.Pod { return deploytest.Pods(t, s.api.Client()) }

// waitDaemonPod waits for a Ready pod of the DaemonSet whose image is
// image, and, when old is not "", for the pod named old to be gone; it
// returns the pod and the time since t0.
func waitDaemonPod(t *testing.T, s *suite, k *kubelet, t0 time.Time, image, old string, timeout time.Duration) (*v1.Pod, time.Duration) {
	t.Helper()
	for {
		var ready *v1.Pod
		oldGone := true
		pods := daemonPods(t, s)
		for i := range pods {
			p := &pods[i]
			if p.Name == old {
				oldGone = false
			} else if deploytest.PodReady(p) && p.Spec.Containers[0].Image == image {
				ready = p
			}
		}
		if ready != nil && oldGone {
			return ready, time.Since(t0)
		}
		if time.Since(t0) > timeout {
			t.Fatalf("no Ready pod of the DaemonSet with image %s (old pod %q gone: %v) after %v; pods:\n%s\nevents:\n%s\nend of the kubelet's log:\n%s",
				image, old, oldGone, timeout, deploytest.Describe(pods), namespaceEvents(t, s, dsNamespace), k.logTail(3000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// namespaceEvents are the Events of a namespace, one per line.
func namespaceEvents(t *testing.T, s *suite, ns string) string {
	t.Helper()
	list, err := s.api.Client().CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		return err.Error()
	}
	var b strings.Builder
	for _, e := range list.Items {
		fmt.Fprintf(&b, "  %s %s/%s %s: %s\n", e.Type, e.InvolvedObject.Kind, e.InvolvedObject.Name, e.Reason, e.Message)
	}
	return b.String()
}

// kubeletGet reads a path of the kubelet's HTTPS port (self-signed,
// anonymous and AlwaysAllow in the e2e configuration).
func kubeletGet(k *kubelet, path string) (string, error) {
	c := http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	resp, err := c.Get(fmt.Sprintf("https://127.0.0.1:%d%s", k.Port, path))
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %s", path, resp.Status)
	}
	return string(b), err
}

// metricValue sums the samples of name whose labels contain every one of
// labels (`key="value"`) in a Prometheus text exposition.
func metricValue(text, name string, labels ...string) (float64, bool) {
	sum, found := 0.0, false
	sc := bufio.NewScanner(strings.NewReader(text))
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		match := true
		for _, l := range labels {
			if !strings.Contains(line, l) {
				match = false
			}
		}
		if !match {
			continue
		}
		f := strings.Fields(line)
		if v, err := strconv.ParseFloat(f[len(f)-1], 64); err == nil {
			sum, found = sum+v, true
		}
	}
	return sum, found
}

// podMetrics reads the DaemonSet pod's /metrics.
func podMetrics() (string, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(dsMetrics)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// containerPID is the host PID of the pod's first container (its task in
// containerd).
func containerPID(t *testing.T, s *suite, p *v1.Pod) int {
	t.Helper()
	if len(p.Status.ContainerStatuses) == 0 {
		t.Fatalf("pod %s has no container status", p.Name)
	}
	id := strings.TrimPrefix(p.Status.ContainerStatuses[0].ContainerID, "containerd://")
	out, err := s.containerd.ctr("tasks", "ls")
	if err != nil {
		t.Fatal(err)
	}
	for _, line := range strings.Split(string(out), "\n") {
		f := strings.Fields(line)
		if len(f) >= 2 && f[0] == id {
			pid, err := strconv.Atoi(f[1])
			if err == nil {
				return pid
			}
		}
	}
	t.Fatalf("container %s of pod %s is not among containerd's tasks:\n%s", id, p.Name, out)
	return 0
}

// privileges are what a container's process may reach on the host: its
// mounts of host paths (from /proc/<pid>/mountinfo: the host's source,
// the path in the container, ro or rw) and its capabilities (from
// /proc/<pid>/status, as names).
type privileges struct {
	mounts              []string
	effective, bounding string
}

// podPrivileges reads the privileges of the process pid.
func podPrivileges(t *testing.T, pid int) privileges {
	t.Helper()
	var p privileges
	mi, err := os.ReadFile(fmt.Sprintf("/proc/%d/mountinfo", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(mi)) {
		// id parent major:minor root mountpoint options ... - fstype source superoptions
		f := strings.Fields(line)
		if len(f) < 6 {
			continue
		}
		root, point, opts := f[3], f[4], f[5]
		i := slices.Index(f, "-")
		if i < 0 || i+1 >= len(f) {
			continue
		}
		fstype := f[i+1]
		// Host paths only: bind mounts (a root other than /) and the
		// kernel's sysfs and procfs; not the image's overlay, the
		// container's own /proc, /dev, /sys and cgroup, nor the files
		// the runtime and the kubelet give every container (hosts,
		// hostname, resolv.conf, the token).
		switch {
		case root == "/" && fstype != "sysfs" && fstype != "proc",
			fstype == "cgroup" || fstype == "cgroup2",
			point == "/proc" || strings.HasPrefix(point, "/proc/") || point == "/sys" || strings.HasPrefix(point, "/dev"),
			point == "/etc/hosts" || point == "/etc/hostname" || point == "/etc/resolv.conf",
			strings.HasPrefix(point, "/var/run/secrets/"):
			continue
		}
		ro := "rw"
		if slices.Contains(strings.Split(opts, ","), "ro") {
			ro = "ro"
		}
		if fstype == "sysfs" || fstype == "proc" {
			root = "/" + map[string]string{"sysfs": "sys", "proc": "proc"}[fstype]
		}
		p.mounts = append(p.mounts, fmt.Sprintf("%s -> %s %s", root, point, ro))
	}
	st, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for line := range strings.Lines(string(st)) {
		k, v, _ := strings.Cut(strings.TrimSpace(line), ":\t")
		switch k {
		case "CapEff":
			p.effective = capNames(t, v)
		case "CapBnd":
			p.bounding = capNames(t, v)
		}
	}
	return p
}

// capNames names the capabilities of a /proc/<pid>/status mask.
func capNames(t *testing.T, hex string) string {
	t.Helper()
	mask, err := strconv.ParseUint(hex, 16, 64)
	if err != nil {
		t.Fatalf("capability mask %q: %v", hex, err)
	}
	names := map[int]string{0: "cap_chown", 1: "cap_dac_override", 2: "cap_dac_read_search", 3: "cap_fowner", 4: "cap_fsetid",
		5: "cap_kill", 6: "cap_setgid", 7: "cap_setuid", 8: "cap_setpcap", 10: "cap_net_bind_service", 12: "cap_net_admin",
		13: "cap_net_raw", 18: "cap_sys_chroot", 19: "cap_sys_ptrace", 21: "cap_sys_admin", 27: "cap_mknod", 29: "cap_audit_write", 31: "cap_setfcap"}
	var out []string
	for i := range 64 {
		if mask&(1<<i) == 0 {
			continue
		}
		if n, ok := names[i]; ok {
			out = append(out, n)
		} else {
			out = append(out, "cap_"+strconv.Itoa(i))
		}
	}
	if len(out) == 0 {
		return "none"
	}
	return strings.Join(out, ",")
}

// writtenByPod is whether the Node's status was last written by a manager
// named hotplugd (its user agent) on the status subresource: the pod, when
// no other hotplugd runs.
func writtenByPod(n *v1.Node) bool {
	for _, f := range n.ManagedFields {
		if f.Manager == "hotplugd" && f.Subresource == "status" {
			return true
		}
	}
	return false
}

// TestDaemonSet runs deploy/kubernetes as users apply it on a one-node
// cluster (etcd, kube-apiserver, kube-controller-manager, kube-scheduler,
// the kubelet on containerd, in kubeadm's layout): the DaemonSet controller
// makes the pod, the scheduler places it, the kubelet runs it from the
// image `make image` built, and its liveness probe passes. From the pod:
// cpu1 offline and a hugepage change set KubeletCapacityStale on its own
// Node with its own bound token; the same token cannot change another Node
// (403); a rollout to a new image digest replaces the pod cleanly.
func TestDaemonSet(t *testing.T) {
	s := setup(t)
	m := acquireMachine(t)
	img, err := hotplugdImage()
	if err != nil {
		t.Fatal(err)
	}
	// The pause image: pods need their sandbox.
	if _, err := workloadImage(); err != nil {
		t.Fatal(err)
	}
	if err := s.api.StartControllers(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.api.StopControllers)
	k := startKubeletWith(t, s, kubeletSpec{KubeadmLayout: true})
	c := s.api.Client()
	ctx := context.Background()

	overlay := deploytest.Overlay{Image: img, APIHost: "127.0.0.1", APIPort: strings.TrimPrefix(s.api.URL, "https://127.0.0.1:")}
	objs := deploytest.Build(t, repoRoot, filepath.Join(s.dir, "overlay"), overlay)
	ref := img.Ref()
	t0 := time.Now()
	remove := deploytest.Apply(t, s.api.RestConfig(), objs)
	t.Cleanup(func() {
		remove()
		// The pods go before the kubelet stops (cleanups run in reverse).
		deadline := time.Now().Add(90 * time.Second)
		for len(daemonPods(t, s)) > 0 {
			if time.Now().After(deadline) {
				t.Errorf("the DaemonSet's pods are not gone 90 s after its deletion:\n%s", deploytest.Describe(daemonPods(t, s)))
				break
			}
			time.Sleep(200 * time.Millisecond)
		}
		if err := s.containerd.waitNoTasks(30 * time.Second); err != nil {
			t.Error(err)
		}
	})
	pod, readyIn := waitDaemonPod(t, s, k, t0, ref, "", 2*time.Minute)
	t.Logf("apply -> pod %s Ready: %v", pod.Name, readyIn.Round(time.Millisecond))
	if pod.Spec.NodeName != nodeName {
		t.Errorf("pod on node %q, want %s", pod.Spec.NodeName, nodeName)
	}

	// The liveness probe has passed: the kubelet's own count of it.
	var probes float64
	for deadline := time.Now().Add(30 * time.Second); probes == 0; time.Sleep(500 * time.Millisecond) {
		text, err := kubeletGet(k, "/metrics/probes")
		if err == nil {
			probes, _ = metricValue(text, "prober_probe_total", `probe_type="Liveness"`, `result="successful"`, `pod="`+pod.Name+`"`)
		}
		if time.Now().After(deadline) {
			t.Fatalf("no successful liveness probe of %s in 30 s (last read: %v); events:\n%s", pod.Name, err, namespaceEvents(t, s, dsNamespace))
		}
	}
	if failed, _ := func() (float64, error) {
		text, err := kubeletGet(k, "/metrics/probes")
		v, _ := metricValue(text, "prober_probe_total", `probe_type="Liveness"`, `result="failed"`, `pod="`+pod.Name+`"`)
		return v, err
	}(); failed > 0 {
		t.Errorf("%v failed liveness probes of %s", failed, pod.Name)
	}
	results.add(result{scenario: "7 DaemonSet", side: "pod", change: "kustomize build deploy/kubernetes (test overlay) + apply",
		correct: "pod Ready " + seconds(readyIn), writes: -1,
		note: fmt.Sprintf("controller made %s, scheduler placed it on %s, image %s; liveness probes passed: %v", pod.Name, pod.Spec.NodeName, shortDigest(img.Digest), probes)})

	t.Run("report-only privileges", func(t *testing.T) {
		pid := containerPID(t, s, pod)
		priv := podPrivileges(t, pid)
		t.Logf("the report-only pod's mounts of host paths (host -> container, ro or rw):\n%s\ncapabilities: effective %s, bounding %s",
			strings.Join(priv.mounts, "\n"), priv.effective, priv.bounding)
		want := []string{"/sys -> /host/sys ro", "/proc -> /host/proc ro", k.RootDir + " -> /var/lib/kubelet ro", "/var/lib/hotplugd -> /var/lib/hotplugd rw"}
		if !slices.Equal(priv.mounts, want) {
			t.Errorf("the report-only pod's mounts of host paths:\n%s\nwant:\n%s", strings.Join(priv.mounts, "\n"), strings.Join(want, "\n"))
		}
		// No system bus: not mounted, no socket to be found.
		for _, m := range priv.mounts {
			if strings.Contains(m, "/run/dbus") {
				t.Errorf("the report-only pod mounts the system bus: %s", m)
			}
		}
		if _, err := os.Stat(fmt.Sprintf("/proc/%d/root/run/dbus/system_bus_socket", pid)); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("the report-only pod has a D-Bus socket (stat: %v)", err)
		}
		// The kubelet's directory is read-only there, even to root: a write
		// through the pod's root fails with EROFS.
		probe := fmt.Sprintf("/proc/%d/root%s/.hotplugd-e2e-write-probe", pid, k.RootDir)
		err := os.WriteFile(probe, nil, 0o600)
		if err == nil {
			os.Remove(probe)
			t.Errorf("the pod's %s is writable", k.RootDir)
		} else if !errors.Is(err, syscall.EROFS) {
			t.Errorf("writing into the pod's %s: %v, want EROFS", k.RootDir, err)
		}
		if priv.effective != "cap_net_admin" || priv.bounding != "cap_net_admin" {
			t.Errorf("the pod's capabilities: effective %s, bounding %s; want cap_net_admin alone", priv.effective, priv.bounding)
		}
		results.add(result{scenario: "7 DaemonSet", side: "pod", change: "report-only pod's privileges", correct: "-", writes: -1,
			note: fmt.Sprintf("capabilities %s; no /run/dbus (socket absent); %s read-only (write: EROFS); mounts: %s",
				priv.effective, k.RootDir, strings.Join(priv.mounts, "; "))})
	})

	// The pod finds its Node current: it reads it with its own token.
	if _, n, ok := waitNode(t, s, time.Now(), 30*time.Second, conditionIs(v1.ConditionFalse)); !ok {
		t.Fatalf("the pod did not find the Node current within 30 s: condition %+v; its log:\n%s", staleCondition(n), podLog(t, k, pod))
	}

	// hotplugd gives a kubelet that has just started --kubelet-grace (20 s)
	// to report before it calls the Node stale: the change comes after, so
	// that what is measured is the pod's reaction.
	time.Sleep(time.Until(k.Started.Add(21 * time.Second)))
	t.Run("cpu1 offline", func(t *testing.T) {
		t1 := time.Now()
		m.SetCPUOnline(t, 1, false)
		took, n, ok := waitNode(t, s, t1, 30*time.Second, conditionIs(v1.ConditionTrue))
		if !ok {
			t.Fatalf("KubeletCapacityStale not True 30 s after cpu1 went offline: %+v; the pod's log:\n%s", staleCondition(n), podLog(t, k, pod))
		}
		if !writtenByPod(n) {
			t.Errorf("the Node's status has no field manager hotplugd: %+v", n.ManagedFields)
		}
		if got := quantity(n.Status.Capacity, v1.ResourceCPU); got != "2" {
			t.Errorf("the kubelet's capacity cpu %s, want 2 (stale: nothing restarted it)", got)
		}
		text, err := podMetrics()
		writes, _ := metricValue(text, "hotplugd_node_writes_total")
		if err != nil || writes == 0 {
			t.Errorf("the pod's /metrics: %v, node writes %v", err, writes)
		}
		results.add(result{scenario: "7 DaemonSet", side: "pod", change: "cpu1 offline", correct: "condition True " + seconds(took), writes: -1,
			note: fmt.Sprintf("set by the pod (field manager hotplugd, its node writes %v): %s", writes, staleCondition(n).Message)})
	})
	if _, n, ok := waitNode(t, s, time.Now(), 30*time.Second, conditionIs(v1.ConditionFalse)); !ok {
		t.Fatalf("condition not False 30 s after cpu1 came back: %+v", staleCondition(n))
	}

	t.Run("hugepages", func(t *testing.T) {
		t1 := time.Now()
		m.SetHugePages(t, node0Hugepages2Mi, 8)
		took, n, ok := waitNode(t, s, t1, 30*time.Second, conditionIs(v1.ConditionTrue))
		if !ok {
			t.Fatalf("KubeletCapacityStale not True 30 s after the hugepage change: %+v; the pod's log:\n%s", staleCondition(n), podLog(t, k, pod))
		}
		results.add(result{scenario: "7 DaemonSet", side: "pod", change: "8 x 2Mi hugepages", correct: "condition True " + seconds(took), writes: -1,
			note: staleCondition(n).Message})
	})
	if _, n, ok := waitNode(t, s, time.Now(), 30*time.Second, conditionIs(v1.ConditionFalse)); !ok {
		t.Fatalf("condition not False 30 s after the hugepages were put back: %+v", staleCondition(n))
	}

	t.Run("other Node forbidden", func(t *testing.T) {
		// The token the kubelet mounted in the pod, read inside the pod's
		// mount namespace.
		pid := containerPID(t, s, pod)
		tok, err := os.ReadFile(fmt.Sprintf("/proc/%d/root/var/run/secrets/kubernetes.io/serviceaccount/token", pid))
		if err != nil {
			t.Fatal(err)
		}
		other := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "e2e-other-node"}}
		if _, err := c.CoreV1().Nodes().Create(ctx, other, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.CoreV1().Nodes().Delete(ctx, other.Name, metav1.DeleteOptions{}) })
		pc, err := kubernetes.NewForConfig(s.api.TokenConfig(strings.TrimSpace(string(tok))))
		if err != nil {
			t.Fatal(err)
		}
		patch := fmt.Sprintf(`{"status":{"conditions":[{"type":%q,"status":"True","reason":"CapacityDrift","message":"e2e"}]}}`, nodepatch.ConditionType)
		_, err = pc.CoreV1().Nodes().Patch(ctx, other.Name, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
		const want = "may change only the Node its pod runs on"
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
			t.Fatalf("the pod's token patching %s: %v, want 403 %q", other.Name, err, want)
		}
		status := err.(apierrors.APIStatus).Status()
		results.add(result{scenario: "7 DaemonSet", side: "pod", change: "the pod's token patches another Node's status", correct: "-", writes: -1,
			note: fmt.Sprintf("%d %s: %s", status.Code, status.Reason, status.Message)})
	})

	t.Run("rollout", func(t *testing.T) {
		bin, err := testimage.GoBuild(repoRoot, filepath.Join(s.dir, "images"), "./cmd/hotplugd", "hotplugd-rollout/hotplugd", "-s -w -X main.version=e2e-rollout")
		if err != nil {
			t.Fatal(err)
		}
		tool, err := imageTool()
		var next image
		if err == nil {
			next, err = testimage.Build(tool, bin, img.Name+":e2e-rollout")
		}
		if err == nil {
			err = importImage(s, next)
		}
		if err != nil {
			t.Fatal(err)
		}
		if next.Digest == img.Digest {
			t.Fatal("the rollout image has the same digest")
		}
		exit := watchExit(t, s, pod)
		t1 := time.Now()
		patch := fmt.Sprintf(`{"spec":{"template":{"spec":{"containers":[{"name":"hotplugd","image":%q}]}}}}`, next.Ref())
		if _, err := c.AppsV1().DaemonSets(dsNamespace).Patch(ctx, dsName, types.StrategicMergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
		np, took := waitDaemonPod(t, s, k, t1, next.Ref(), pod.Name, 2*time.Minute)
		code := exit()
		if code != 0 {
			t.Errorf("the old pod's container exited with %d, want 0 (a clean stop on SIGTERM)", code)
		}
		if rc := np.Status.ContainerStatuses[0].RestartCount; rc != 0 {
			t.Errorf("new pod restarted %d times", rc)
		}
		if log := podLog(t, k, np); !strings.Contains(log, `"version":"e2e-rollout"`) {
			t.Errorf("the new pod does not run the new build; its log:\n%s", log)
		}
		if _, n, ok := waitNode(t, s, time.Now(), 30*time.Second, conditionIs(v1.ConditionFalse)); !ok {
			t.Errorf("after the rollout the condition is %+v, want False", staleCondition(n))
		}
		// The DaemonSet controller writes its status after it sees the new
		// pod Ready: watch for it rather than read it once.
		if ds := waitRolledOut(t, c, 30*time.Second); !rolledOut(ds) {
			t.Errorf("DaemonSet status 30s after the new pod was Ready: %+v", ds.Status)
		}
		results.add(result{scenario: "7 DaemonSet", side: "pod", change: "rollout to a new image digest", correct: "new pod Ready " + seconds(took), writes: -1,
			note: fmt.Sprintf("%s -> %s; old pod %s exited %d; new pod %s, restarts 0", shortDigest(img.Digest), shortDigest(next.Digest), pod.Name, code, np.Name)})
	})
}

// waitRolledOut watches the DaemonSet until rolledOut holds, for at most
// timeout, and returns the last version seen.
func waitRolledOut(t *testing.T, c kubernetes.Interface, timeout time.Duration) *appsv1.DaemonSet {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	ds, err := c.AppsV1().DaemonSets(dsNamespace).Get(ctx, dsName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if rolledOut(ds) {
		return ds
	}
	w, err := c.AppsV1().DaemonSets(dsNamespace).Watch(ctx, metav1.ListOptions{
		FieldSelector: "metadata.name=" + dsName, ResourceVersion: ds.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	for ev := range w.ResultChan() {
		if d, ok := ev.Object.(*appsv1.DaemonSet); ok {
			if ds = d; rolledOut(ds) {
				return ds
			}
		}
	}
	return ds
}

// rolledOut is whether every pod of the DaemonSet is updated and available.
func rolledOut(ds *appsv1.DaemonSet) bool {
	st := ds.Status
	return st.ObservedGeneration >= ds.Generation && st.UpdatedNumberScheduled == st.DesiredNumberScheduled &&
		st.NumberAvailable == st.DesiredNumberScheduled && st.DesiredNumberScheduled == 1
}

// watchExit follows pod until it is deleted; the function it returns waits
// for that (at most 2 minutes) and returns the exit code its container's
// last status showed (-1 when none was seen).
func watchExit(t *testing.T, s *suite, pod *v1.Pod) func() int {
	t.Helper()
	w, err := s.api.Client().CoreV1().Pods(pod.Namespace).Watch(context.Background(), metav1.ListOptions{
		FieldSelector: "metadata.name=" + pod.Name, ResourceVersion: pod.ResourceVersion,
	})
	if err != nil {
		t.Fatal(err)
	}
	code := make(chan int, 1)
	go func() {
		last := -1
		defer func() { code <- last }()
		for ev := range w.ResultChan() {
			p, ok := ev.Object.(*v1.Pod)
			if !ok {
				continue
			}
			for _, cs := range p.Status.ContainerStatuses {
				if cs.State.Terminated != nil {
					last = int(cs.State.Terminated.ExitCode)
				}
			}
			if ev.Type == "DELETED" {
				return
			}
		}
	}()
	return func() int {
		select {
		case c := <-code:
			return c
		case <-time.After(2 * time.Minute):
			w.Stop()
			return <-code
		}
	}
}

// podLog is the pod's first container's log as the kubelet wrote it
// (<podLogsDir>/<namespace>_<name>_<uid>/<container>/0.log).
func podLog(t *testing.T, k *kubelet, p *v1.Pod) string {
	t.Helper()
	if len(p.Spec.Containers) == 0 {
		return ""
	}
	path := filepath.Join(k.dir, "pod-logs", fmt.Sprintf("%s_%s_%s", p.Namespace, p.Name, p.UID), p.Spec.Containers[0].Name, "0.log")
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tail(b, 6000)
}

// shortDigest is "sha256:" and the first 12 hex digits.
func shortDigest(d string) string {
	if len(d) > 19 {
		return d[:19]
	}
	return d
}
