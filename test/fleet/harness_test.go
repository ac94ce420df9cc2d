package fleet

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/procfs"
	"golang.org/x/sys/unix"
	"k8s.io/client-go/kubernetes"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// The restart helper: the test binary, run by a node's restart command
// (hotplugd's --kubelet-restart-command), stands for the kubelet's
// supervisor and the kubelet: it asks the harness to restart the node's
// kubelet and exits once that is done, as `systemctl restart kubelet` does.
const (
	helperEnv     = "HOTPLUGD_FLEET_HELPER" // "restart"
	helperNodeEnv = "HOTPLUGD_FLEET_HELPER_NODE"
	helperURLEnv  = "HOTPLUGD_FLEET_HELPER_URL"
)

// restartTime is how long a simulated kubelet restart takes, from its stop
// to its Node showing the machine: a real kubelet's restart shows the new
// capacity 0.6-1.0 s after it (docs/testing.md, §5). It also makes the
// restarts long enough to overlap if the budget let them.
const restartTime = time.Second

// slowRestartTime is the restart of a slow kubelet (a large node, a slow
// disk): twice the budget's Lease duration, so that its hold lives only by
// its renewals, also while the next hotplugd settles a restart its killed
// predecessor asked for.
const slowRestartTime = 2 * budgetLease

// init makes the test binary the restart helper when the restart command
// runs it, before the testing package parses any flag.
func init() {
	if os.Getenv(helperEnv) == "restart" {
		os.Exit(restartHelper())
	}
}

// restartHelper asks the harness for the restart of its node's kubelet
// and waits for it: exit 0 when it was done. It tells the harness when its
// process began, which is when the restart began.
func restartHelper() int {
	q := url.Values{"node": {os.Getenv(helperNodeEnv)}, "pid": {strconv.Itoa(os.Getpid())}}
	if t, err := processStart(); err == nil {
		q.Set("start", strconv.FormatInt(t.UnixNano(), 10))
	}
	c := &http.Client{Timeout: 5 * time.Minute}
	resp, err := c.Post(os.Getenv(helperURLEnv)+"/restart?"+q.Encode(), "text/plain", nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "fleet kubelet restart:", err)
		return 1
	}
	defer resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 4096))
		fmt.Fprintf(os.Stderr, "fleet kubelet restart: %s: %s\n", resp.Status, b)
		return 1
	}
	return 0
}

// processStart is when this process was started (exec'd), to the
// kernel's clock tick: its start in /proc/self/stat, in ticks since boot,
// against /proc/uptime.
func processStart() (time.Time, error) {
	now := time.Now()
	stat, err := os.ReadFile("/proc/self/stat")
	if err != nil {
		return time.Time{}, err
	}
	// The fields after the command's name, which may hold spaces: state
	// is the 3rd field, starttime the 22nd.
	i := bytes.LastIndexByte(stat, ')')
	if i < 0 {
		return time.Time{}, fmt.Errorf("fleet: /proc/self/stat: %q", stat)
	}
	f := strings.Fields(string(stat[i+1:]))
	if len(f) < 20 {
		return time.Time{}, fmt.Errorf("fleet: /proc/self/stat: %q", stat)
	}
	ticks, err := strconv.ParseInt(f[19], 10, 64)
	if err != nil {
		return time.Time{}, err
	}
	up, err := os.ReadFile("/proc/uptime")
	if err != nil {
		return time.Time{}, err
	}
	uptime, err := strconv.ParseFloat(strings.Fields(string(up))[0], 64)
	if err != nil {
		return time.Time{}, err
	}
	const clockTicks = 100 // USER_HZ, 100 on every Linux architecture Go runs on
	age := time.Duration((uptime - float64(ticks)/clockTicks) * float64(time.Second))
	return now.Add(-age), nil
}

// restartCommand is a node's --kubelet-restart-command. When the node's
// hotplugd runs at nice 19 (renice), the helper is started back at the
// test's priority: it stands for the kubelet's supervisor and the
// kubelet, which have the node's CPU to themselves on a cluster, and here
// would wait behind the whole fleet.
func restartCommand(self, harnessURL, node string, renice bool) string {
	prefix := ""
	if renice {
		prefix = fmt.Sprintf("nice -n %d ", ownNice()-19)
	}
	return fmt.Sprintf("%s=restart %s=%s %s=%s exec %s%s", helperEnv, helperNodeEnv, shellQuote(node), helperURLEnv,
		shellQuote(harnessURL), prefix, shellQuote(self))
}

// ownNice is the test's nice value (make test runs it at 10).
func ownNice() int {
	p, err := unix.Getpriority(unix.PRIO_PROCESS, 0)
	if err != nil {
		return 0
	}
	return 20 - p // the system call's value, not nice(2)'s
}

// restart is one kubelet restart: from the start of the helper process
// (the restart command's, by the kernel) to the Node showing the machine
// (by the harness, on the same clock).
type restart struct {
	node       string
	pid        int // the helper's
	start, end time.Time
	// received is when the harness got the helper's request: the time
	// from start to it is the helper's own start-up.
	received time.Time
	err      error
}

// harness is the kubelets' side of the fleet: an HTTP server on 127.0.0.1
// that the restart helpers call; it does what a restarted kubelet does
// (reports the node's machine as it is now on the Node) and records every
// restart.
type harness struct {
	c     kubernetes.Interface
	cfg   *kubeletv1beta1.KubeletConfiguration
	nodes map[string]*fleetNode
	// slow are the nodes whose kubelet restarts in slowRestartTime.
	slow map[string]bool
	url  string
	srv  *http.Server

	mu       sync.Mutex
	restarts []*restart
	active   map[string]int // node -> restarts running
}

func startHarness(c kubernetes.Interface, cfg *kubeletv1beta1.KubeletConfiguration, nodes []*fleetNode, slow []string) (*harness, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	h := &harness{c: c, cfg: cfg, nodes: map[string]*fleetNode{}, url: "http://" + ln.Addr().String(), active: map[string]int{}, slow: map[string]bool{}}
	for _, n := range slow {
		h.slow[n] = true
	}
	for _, n := range nodes {
		h.nodes[n.name] = n
	}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /restart", h.serveRestart)
	h.srv = &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go h.srv.Serve(ln)
	return h, nil
}

func (h *harness) close() { h.srv.Close() }

func (h *harness) serveRestart(w http.ResponseWriter, r *http.Request) {
	n := h.nodes[r.URL.Query().Get("node")]
	if n == nil {
		http.Error(w, "no such node", http.StatusNotFound)
		return
	}
	pid, _ := strconv.Atoi(r.URL.Query().Get("pid"))
	now := time.Now()
	rec := &restart{node: n.name, pid: pid, start: now, received: now}
	if ns, err := strconv.ParseInt(r.URL.Query().Get("start"), 10, 64); err == nil && ns < now.UnixNano() {
		rec.start = time.Unix(0, ns)
	}
	h.mu.Lock()
	h.restarts = append(h.restarts, rec)
	h.active[n.name]++
	h.mu.Unlock()
	err := h.restartKubelet(n)
	h.mu.Lock()
	rec.end, rec.err = time.Now(), err
	h.active[n.name]--
	h.mu.Unlock()
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	w.WriteHeader(http.StatusNoContent)
}

// restartKubelet is a kubelet's restart as the API server sees it: after
// restartTime (slowRestartTime for a slow node), the Node's capacity and
// allocatable are the machine's as it is then. It goes on whatever becomes
// of the helper, as a supervisor's restart does.
func (h *harness) restartKubelet(n *fleetNode) error {
	d := restartTime
	if h.slow[n.name] {
		d = slowRestartTime
	}
	time.Sleep(d) // the simulated kubelet's stop and start
	capacity, allocatable, err := n.status(h.cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	return reportStatus(ctx, h.c, n.name, capacity, allocatable)
}

// running are the nodes with a restart under way.
func (h *harness) running() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []string
	for n, k := range h.active {
		if k > 0 {
			out = append(out, n)
		}
	}
	slices.Sort(out)
	return out
}

// since is when the node's running restart began (zero when none runs).
func (h *harness) since(node string) time.Time {
	h.mu.Lock()
	defer h.mu.Unlock()
	for i := len(h.restarts) - 1; i >= 0; i-- {
		if r := h.restarts[i]; r.node == node && r.end.IsZero() {
			return r.start
		}
	}
	return time.Time{}
}

// records is a copy of every restart so far, in start order.
func (h *harness) records() []restart {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make([]restart, len(h.restarts))
	for i, r := range h.restarts {
		out[i] = *r
	}
	return out
}

// overlap is the most restarts that ran at one moment, that moment, and
// the restarts then.
type overlap struct {
	most  int
	at    time.Time
	which []restart
}

// maxOverlap computes overlap over restarts; one still running counts as
// running until now.
func maxOverlap(rs []restart) overlap {
	type edge struct {
		at    time.Time
		delta int
	}
	var edges []edge
	now := time.Now()
	for _, r := range rs {
		end := r.end
		if end.IsZero() {
			end = now
		}
		edges = append(edges, edge{r.start, 1}, edge{end, -1})
	}
	// At one instant an end comes before a start: closed intervals of
	// distinct restarts never share an instant on this clock anyway.
	sort.Slice(edges, func(i, j int) bool {
		if edges[i].at.Equal(edges[j].at) {
			return edges[i].delta < edges[j].delta
		}
		return edges[i].at.Before(edges[j].at)
	})
	var o overlap
	cur := 0
	for _, e := range edges {
		cur += e.delta
		if cur > o.most {
			o.most, o.at = cur, e.at
		}
	}
	for _, r := range rs {
		end := r.end
		if end.IsZero() {
			end = now
		}
		if !r.start.After(o.at) && !end.Before(o.at) {
			o.which = append(o.which, r)
		}
	}
	return o
}

func (o overlap) String() string {
	s := fmt.Sprintf("%d at %s:", o.most, o.at.Format("15:04:05.000"))
	for _, r := range o.which {
		s += fmt.Sprintf(" %s [%s, %s]", r.node, r.start.Format("15:04:05.000"), r.end.Format("15:04:05.000"))
	}
	return s
}

// reaper reaps the restart helpers that a SIGKILLed hotplugd left running:
// the test is the child subreaper, so they become its children. Only the
// helpers (the test binary's name, or the shell before its exec) are
// reaped, never a process the test started itself (os/exec waits for
// those).
type reaper struct {
	self  int
	comms []string
}

func newReaper() (*reaper, error) {
	if err := unix.Prctl(unix.PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0); err != nil {
		return nil, fmt.Errorf("fleet: becoming the child subreaper: %w", err)
	}
	exe, err := os.Executable()
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	comm := filepath.Base(exe)
	if len(comm) > 15 { // TASK_COMM_LEN
		comm = comm[:15]
	}
	return &reaper{self: os.Getpid(), comms: []string{comm, "sh"}}, nil
}

// reap waits for the exited helpers among the test's children, and
// returns how many it reaped.
func (r *reaper) reap() int {
	fs, err := procfs.NewFS("/proc")
	if err != nil {
		return 0
	}
	procs, err := fs.AllProcs()
	if err != nil {
		return 0
	}
	n := 0
	for _, p := range procs {
		st, err := p.Stat()
		if err != nil || st.PPID != r.self || st.State != "Z" || !slices.Contains(r.comms, st.Comm) {
			continue
		}
		var ws unix.WaitStatus
		if pid, err := unix.Wait4(p.PID, &ws, unix.WNOHANG, nil); err == nil && pid == p.PID {
			n++
		}
	}
	return n
}

// run reaps every interval until ctx ends.
func (r *reaper) run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
			r.reap()
		}
	}
}
