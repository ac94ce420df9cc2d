//go:build e2e

package node

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"github.com/hotplugd/hotplugd/internal/deploytest"
	"github.com/hotplugd/hotplugd/internal/testimage"
)

// hostBuilds are what the host builds once for the guest: hotplugd (as
// make build does), hotplugd with its fault points (-tags faultinject,
// internal/faultpoint, for scenario 10), its image (make image), the pause
// and workload images, and the probed server's (scenario 11).
type hostBuilds struct {
	hotplugd      string
	faulty        string
	hotplugdImage testimage.Image
	pause         testimage.Image
	workload      testimage.Image
	probed        testimage.Image
}

func buildForGuest(t *testing.T) hostBuilds {
	t.Helper()
	dir := tempDir(t, "hotplugd-node-build-")
	start := time.Now()
	var b hostBuilds
	var err error
	if b.hotplugd, err = testimage.GoBuild(repoRoot, dir, "./cmd/hotplugd", "hotplugd", "-s -w -X main.version=e2e-node"); err != nil {
		t.Fatal(err)
	}
	b.faulty = filepath.Join(dir, "faulty", "hotplugd")
	cmd := exec.Command("go", "build", "-trimpath", "-tags", "faultinject", "-ldflags", "-s -w -X main.version=e2e-node-faultinject", "-o", b.faulty, "./cmd/hotplugd")
	cmd.Dir = repoRoot
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build -tags faultinject ./cmd/hotplugd: %v\n%s", err, out)
	}
	tool, err := testimage.Tool(repoRoot, dir)
	if err != nil {
		t.Fatal(err)
	}
	if b.pause, err = testimage.Package(repoRoot, dir, tool, "pause", testimage.PauseName); err != nil {
		t.Fatal(err)
	}
	if b.workload, err = testimage.Package(repoRoot, dir, tool, "workload", testimage.WorkloadName); err != nil {
		t.Fatal(err)
	}
	probed, err := testimage.GoBuild(repoRoot, filepath.Join(dir, "images"), "./test/e2e/node/probed", "probed", "-s -w")
	if err != nil {
		t.Fatal(err)
	}
	if b.probed, err = testimage.Build(tool, probed, probedImageName); err != nil {
		t.Fatal(err)
	}
	if b.hotplugdImage, _, err = testimage.Make(repoRoot); err != nil {
		t.Fatal(err)
	}
	t.Logf("built hotplugd, its image %s and the pause, workload and probed images in %v", b.hotplugdImage.Digest, time.Since(start).Round(time.Millisecond))
	return b
}

// importImages copies the images into the guest and imports them into
// containerd's k8s.io namespace, named by digest too (a pod names its image
// by digest).
func (v *vm) importImages(imgs ...testimage.Image) {
	v.t.Helper()
	for _, img := range imgs {
		dst := "/root/images/" + filepath.Base(img.Archive)
		v.putFile(img.Archive, dst, 0o644)
		out := v.run("ctr", "-n", "k8s.io", "images", "import", dst)
		name, digest, ok := testimage.ImportedAs([]byte(out.Stdout + out.Stderr))
		if !ok || digest != img.Digest {
			v.t.Fatalf("ctr images import %s: imported %s %s, want %s:\n%s", dst, name, digest, img.Digest, out)
		}
		v.run("ctr", "-n", "k8s.io", "images", "tag", "--force", name, img.Ref())
	}
}

// join does what kubeadm join does on a node, for this cluster: the
// kubelet's kubeconfig, configuration and flags file, then `systemctl
// enable --now kubelet`; it waits for the Node to be Ready.
func (v *vm) join() time.Duration {
	v.t.Helper()
	kubeconfig, clientPEM := guestKubeconfig(v.t)
	v.put(kubeletClientPEM, clientPEM, 0o600)
	v.put("/etc/kubernetes/kubelet.conf", kubeconfig, 0o600)
	v.put("/var/lib/kubelet/config.yaml", []byte(kubeletConfig), 0o644)
	v.put("/var/lib/kubelet/kubeadm-flags.env", []byte(kubeadmFlags), 0o644)
	v.run("mkdir", "-p", "/etc/kubernetes/manifests")
	start := time.Now()
	v.run("systemctl", "enable", "--now", "kubelet")
	return v.waitReady(start)
}

// waitReady waits for the Node to be Ready with a heartbeat after from.
func (v *vm) waitReady(from time.Time) time.Duration {
	v.t.Helper()
	var last *v1.Node
	if !waitFor(readyTimeout, 200*time.Millisecond, func() bool {
		last = getNode(v.t)
		return last != nil && nodeReady(last, from)
	}) {
		v.t.Fatalf("the Node was not Ready within %v (%s); kubelet:\n%s", readyTimeout, capacityOf(last), v.journal("kubelet", 40))
	}
	return time.Since(from)
}

func nodeReady(n *v1.Node, since time.Time) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == v1.NodeReady {
			return c.Status == v1.ConditionTrue && !c.LastHeartbeatTime.Time.Before(since.Truncate(time.Second))
		}
	}
	return false
}

// journal is the last n lines of a unit's journal.
func (v *vm) journal(unit string, n int) string {
	v.t.Helper()
	return v.exec("journalctl", "-u", unit, "-n", strconv.Itoa(n), "--no-pager", "-o", "short-precise").Stdout
}

// mark is the guest's clock now, "@<seconds>.<microseconds>", for
// journalctl --since: what the journal has from now on. (A cursor from
// `journalctl -n 0 --show-cursor` with --after-cursor and field matches
// counted no kubelet start where there was one.)
func (v *vm) mark() string {
	v.t.Helper()
	return strings.TrimSpace(v.run("date", "+@%s.%6N").Stdout)
}

// unitStarted is the MESSAGE_ID systemd logs when a unit's start job is
// done (sd-messages.h SD_MESSAGE_UNIT_STARTED).
const unitStarted = "39f53479d3a045ac8e11786248231fbf"

// starts counts the kubelet's starts since mark, from systemd's own
// journal entries: a restart through D-Bus is one.
func (v *vm) starts(mark string) int {
	v.t.Helper()
	out := v.run("journalctl", "--since", mark, "-o", "json", "--no-pager",
		"MESSAGE_ID="+unitStarted, "UNIT=kubelet.service").Stdout
	return strings.Count(out, "\n")
}

// hotplugdMetric sums a metric's series from hotplugd's /metrics in the
// guest; -1 when it does not answer.
func (v *vm) hotplugdMetric(name string) float64 {
	body, err := v.fetch("http://127.0.0.1:9792/metrics")
	if err != nil {
		return -1
	}
	sum := 0.0
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		line := sc.Text()
		if !strings.HasPrefix(line, name+" ") && !strings.HasPrefix(line, name+"{") {
			continue
		}
		f := strings.Fields(line)
		x, err := strconv.ParseFloat(f[len(f)-1], 64)
		if err == nil {
			sum += x
		}
	}
	return sum
}

// installHotplugd installs hotplugd as docs/install.md's "systemd" section
// tells an operator: the commands between its systemd-install markers run
// in a copy of the repository's deploy/systemd and the built binary.
func (v *vm) installHotplugd(bin string) {
	v.t.Helper()
	const at = "/root/hotplugd"
	v.putFile(bin, at+"/bin/hotplugd", 0o755)
	for _, f := range []string{"hotplugd.service", "hotplugd.default", "kubelet.service.d/10-hotplugd-preflight.conf"} {
		v.putFile(filepath.Join(repoRoot, "deploy", "systemd", f), at+"/deploy/systemd/"+f, 0o644)
	}
	v.applySystemdCluster()
	script := readmeBlock(v.t, "systemd-install")
	v.t.Logf("docs/install.md's systemd install:\n%s", script)
	v.sh("cd " + at + "\n" + script)
}

// applySystemdCluster does what docs/install.md's systemd section has an
// admin do for systemd nodes with the remedy: once per cluster its
// systemd-cluster block (kubectl apply -k deploy/systemd/cluster: the
// service account, the restart budget's Role and admission policy), here
// with the real kustomize and server-side apply as the admin, the block
// being exactly that command; then per node a token of the service account
// bound to the Node (kubectl create token --bound-object-kind Node, here
// the same TokenRequest), installed at guestBudgetToken. The objects stay:
// the API server is the run's own.
func (v *vm) applySystemdCluster() {
	v.t.Helper()
	const want = "kubectl apply -k deploy/systemd/cluster"
	if got := strings.TrimSpace(readmeBlock(v.t, "systemd-cluster")); got != want {
		v.t.Fatalf("docs/install.md's systemd-cluster block is %q; this test does %q", got, want)
	}
	objs := deploytest.Kustomize(v.t, filepath.Join(repoRoot, "deploy", "systemd", "cluster"))
	deploytest.Apply(v.t, api(v.t).RestConfig(), objs)
	ctx := context.Background()
	c := api(v.t).Client()
	n, err := c.CoreV1().Nodes().Get(ctx, nodeName, metav1.GetOptions{})
	if err != nil {
		v.t.Fatal(err)
	}
	tr, err := c.CoreV1().ServiceAccounts(deploytest.Namespace).CreateToken(ctx, "hotplugd", &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(8760 * 3600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		v.t.Fatalf("a token bound to Node %s: %v", nodeName, err)
	}
	v.put(guestBudgetToken, []byte(tr.Status.Token), 0o600)
}

// guestBudgetToken is where the node keeps its restart budget token
// (docs/install.md; --restart-budget-token-file).
const guestBudgetToken = "/etc/hotplugd/restart-budget.token"

// Where hotplugd's binary and the kubelet's preflight drop-in go on the
// node (deploy/systemd, docs/install.md's systemd install).
const (
	guestHotplugd        = "/usr/local/bin/hotplugd"
	guestPreflightDropIn = "/etc/systemd/system/kubelet.service.d/10-hotplugd-preflight.conf"
)

// provisionPreflight installs what a node's provisioning installs for the
// DaemonSet's remedy before the kubelet's first start: hotplugd's binary
// and the kubelet's preflight drop-in (no hotplugd unit). The remedy from
// the pod restarts a kubelet with a static CPU manager only where its start
// runs hotplugd preflight.
func (v *vm) provisionPreflight(bin string) {
	v.t.Helper()
	v.putFile(bin, guestHotplugd, 0o755)
	v.putFile(filepath.Join(repoRoot, "deploy", "systemd", "kubelet.service.d", "10-hotplugd-preflight.conf"), guestPreflightDropIn, 0o644)
	v.run("systemctl", "daemon-reload")
}

// readmeBlock is the shell code of docs/install.md's ```sh blocks between
// <!-- begin NAME --> and <!-- end NAME --> (the README links to it).
func readmeBlock(t *testing.T, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repoRoot, "docs", "install.md"))
	if err != nil {
		t.Fatal(err)
	}
	s := string(b)
	_, rest, ok := strings.Cut(s, "<!-- begin "+name+" -->")
	body, _, ok2 := strings.Cut(rest, "<!-- end "+name+" -->")
	if !ok || !ok2 {
		t.Fatalf("docs/install.md has no <!-- begin %s --> ... <!-- end %s --> section", name, name)
	}
	var code strings.Builder
	for _, m := range shBlock.FindAllStringSubmatch(body, -1) {
		code.WriteString(m[1])
	}
	if code.Len() == 0 {
		t.Fatalf("docs/install.md's %s section has no ```sh block", name)
	}
	return code.String()
}

var shBlock = regexp.MustCompile("(?s)```sh\n(.*?)```")

// setHotplugdArgs sets HOTPLUGD_ARGS in /etc/default/hotplugd, as an
// operator edits it.
func (v *vm) setHotplugdArgs(args string) {
	v.t.Helper()
	v.sh(`sed -i 's|^HOTPLUGD_ARGS=.*|HOTPLUGD_ARGS="` + args + `"|' /etc/default/hotplugd`)
}

// hotplugdOff makes the node a kubelet-alone node: hotplugd disabled and
// stopped, the preflight drop-in moved aside.
func (v *vm) hotplugdOff() {
	v.t.Helper()
	v.sh(`systemctl disable --now hotplugd
mkdir -p /root/off
if [ -f /etc/systemd/system/kubelet.service.d/10-hotplugd-preflight.conf ]; then
  mv /etc/systemd/system/kubelet.service.d/10-hotplugd-preflight.conf /root/off/
fi
systemctl daemon-reload`)
}

// hotplugdOn undoes hotplugdOff (hotplugd enabled, not started).
func (v *vm) hotplugdOn() {
	v.t.Helper()
	v.sh(`if [ -f /root/off/10-hotplugd-preflight.conf ]; then
  mv /root/off/10-hotplugd-preflight.conf /etc/systemd/system/kubelet.service.d/
fi
systemctl daemon-reload
systemctl enable hotplugd`)
}

// kubeletSummary is the node part of the kubelet's summary API
// (/stats/summary), through the forward of its port 10250.
type kubeletSummary struct {
	Node struct {
		Memory struct {
			AvailableBytes  *uint64 `json:"availableBytes"`
			WorkingSetBytes *uint64 `json:"workingSetBytes"`
		} `json:"memory"`
	} `json:"node"`
}

func (v *vm) summary() kubeletSummary {
	v.t.Helper()
	c := http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		// The kubelet's self-signed serving certificate; its API is
		// reached only through this test's forward.
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true},
	}}
	var s kubeletSummary
	resp, err := c.Get(v.kubelet + "/stats/summary")
	if err != nil {
		v.t.Fatalf("kubelet summary: %v", err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&s); err != nil {
		v.t.Fatalf("kubelet summary: %v", err)
	}
	if s.Node.Memory.AvailableBytes == nil || s.Node.Memory.WorkingSetBytes == nil {
		v.t.Fatalf("kubelet summary without node memory: %+v", s)
	}
	return s
}

// cpuManagerState is the kubelet's cpu_manager_state in the guest.
type cpuManagerState struct {
	PolicyName    string                       `json:"policyName"`
	DefaultCPUSet string                       `json:"defaultCpuSet"`
	Entries       map[string]map[string]string `json:"entries"`
}

func (v *vm) cpuState() cpuManagerState {
	v.t.Helper()
	raw := v.cat("/var/lib/kubelet/cpu_manager_state")
	var s cpuManagerState
	if err := json.Unmarshal([]byte(raw), &s); err != nil {
		v.t.Fatalf("cpu_manager_state: %v\n%s", err, raw)
	}
	return s
}

// podState is what "untouched" means for the pinned pod.
type podState struct {
	UID       string
	Container string
	Restarts  int32
	Running   bool
	Assigned  string // its CPUs in cpu_manager_state
	Cpuset    string // its container cgroup's cpuset.cpus
}

func (p podState) String() string {
	id := p.Container
	if len(id) > 12 {
		id = id[:12]
	}
	return fmt.Sprintf("container %s, restarts %d, running %v, assigned %q, cpuset %q", id, p.Restarts, p.Running, p.Assigned, p.Cpuset)
}

// pinnedState reads the pinned pod from the API, the state file and its
// container's cgroup.
func (v *vm) pinnedState() podState {
	v.t.Helper()
	p, err := api(v.t).Client().CoreV1().Pods("default").Get(context.Background(), "pinned", metav1.GetOptions{})
	if err != nil {
		v.t.Fatal(err)
	}
	st := podState{UID: string(p.UID)}
	for _, cs := range p.Status.ContainerStatuses {
		st.Container = strings.TrimPrefix(cs.ContainerID, "containerd://")
		st.Restarts = cs.RestartCount
		st.Running = cs.State.Running != nil
	}
	st.Assigned = v.cpuState().Entries[st.UID]["work"]
	if st.Container != "" {
		out := v.exec("/bin/sh", "-c", "cat /sys/fs/cgroup/kubepods.slice/*/cri-containerd-"+st.Container+".scope/cpuset.cpus")
		st.Cpuset = strings.TrimSpace(out.Stdout)
	}
	return st
}

// runPinned creates the pinned pod (and the namespace's default service
// account, which admission wants and no controller creates here) and waits
// for it to run.
func (v *vm) runPinned(image string) podState {
	v.t.Helper()
	c := api(v.t).Client()
	ctx := context.Background()
	sa := &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "default", Namespace: "default"}}
	if _, err := c.CoreV1().ServiceAccounts("default").Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		v.t.Fatal(err)
	}
	if _, err := c.CoreV1().Pods("default").Create(ctx, pinnedPod(image), metav1.CreateOptions{}); err != nil {
		v.t.Fatal(err)
	}
	return v.waitPinnedRunning()
}

func (v *vm) waitPinnedRunning() podState {
	v.t.Helper()
	var st podState
	if !waitFor(readyTimeout, 500*time.Millisecond, func() bool {
		st = v.pinnedState()
		return st.Running && st.Cpuset != ""
	}) {
		v.t.Fatalf("the pinned pod is not running after %v: %s; kubelet:\n%s", readyTimeout, st, v.journal("kubelet", 40))
	}
	return st
}

// waitLog waits until a unit's journal since mark ("": this boot) has a
// line matching re.
func (v *vm) waitLog(unit, mark string, timeout time.Duration, re *regexp.Regexp) (string, bool) {
	v.t.Helper()
	var line string
	from := []string{"-b"}
	if mark != "" {
		from = []string{"--since", mark}
	}
	ok := waitFor(timeout, time.Second, func() bool {
		out := v.exec(append(append([]string{"journalctl", "-u", unit}, from...), "-o", "cat", "--no-pager")...).Stdout
		line = re.FindString(out)
		return line != ""
	})
	return line, ok
}

// restartHotplugd restarts hotplugd's unit; a start that fails fails the
// test with hotplugd's own words.
func (v *vm) restartHotplugd() {
	v.t.Helper()
	if r := v.exec("systemctl", "restart", "hotplugd"); r.Code != 0 {
		v.t.Fatalf("systemctl restart hotplugd: %s\nhotplugd:\n%s", r, v.journal("hotplugd", 40))
	}
}
