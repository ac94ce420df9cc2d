package fleet

import (
	"fmt"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"golang.org/x/sys/unix"
)

// results are the fleet's measurements, for the report.
type results struct {
	cfg  config
	wall time.Duration
	slow []string

	build, layout, register time.Duration
	startup, startupSlowest time.Duration
	startupBusy             float64

	// The API server with the Nodes and no hotplugd, then at idle.
	baseline                  window
	rssEmpty, rssNodes        float64
	watchesBefore             float64
	baselineWatchesByResource map[string]float64
	apiCPUBaseline            float64

	idle              window
	idleRequests      map[requestClass]float64
	idleRejected      float64
	watchesFleet      float64
	watchesByResource map[string]float64
	rssFleet          float64
	apiCPUIdle        float64
	hotplugd          procTotals
	hotplugdIdleCPU   float64
	idleBusy          float64

	changeWrite time.Duration
	change      window
	staleTimes  []time.Duration

	remedy       window
	currentTimes []time.Duration
	currentBound time.Duration
	remedyBusy   float64
	restarts     []restart
	overlap      overlap
	kills        []kill
	slowKill     string // the kill of a slow node: which, how far into its restart
	leases       int

	// The machine.
	memBefore, memFleet    uint64
	testFDs                int
	load                   float64
	inotifyWas, inotifyNow int
	nofile                 uint64
	// taskRoom is how many more tasks the machine allowed before the
	// fleet, and taskLimit what limited it; tasks is the machine's tasks
	// at idle.
	taskRoom  int
	taskLimit string
	tasks     int
}

// limits records the machine's limits the fleet met.
func (r *results) limits() {
	var rl unix.Rlimit
	if unix.Getrlimit(unix.RLIMIT_NOFILE, &rl) == nil {
		r.nofile = rl.Cur
	}
}

// quantileOf is the q-quantile of sorted durations.
func quantileOf(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	i := int(q*float64(len(ds))+0.5) - 1
	return ds[min(max(i, 0), len(ds)-1)]
}

func secs(d time.Duration) string { return fmt.Sprintf("%.1f s", d.Seconds()) }

// bucket prints a histogram bucket bound as the quantile it bounds.
func bucket(bound, count float64) string {
	if count == 0 {
		return "no requests"
	}
	return fmt.Sprintf("<= %g s (bucket bound; %.0f requests)", bound, count)
}

// markdown is the results table, with the command that produced it.
func (r *results) markdown() string {
	var b strings.Builder
	n := float64(r.cfg.nodes)
	perNodeHour := func(v float64, w window) float64 { return v / n / (w.seconds() / 3600) }
	host, _ := os.Hostname()
	var uts unix.Utsname
	unix.Uname(&uts)
	fmt.Fprintf(&b, "## hotplugd fleet: %d nodes, restart budget %d\n\n", r.cfg.nodes, r.cfg.budget)
	fmt.Fprintf(&b, "Command (from the repository's root, as root):\n\n```sh\nexport HOTPLUGD_KUBEBIN=\"$(hack/kubebin.sh)\"\n%s=%d %s=%d %s=%d %s=%s go test -vet=off -count=1 -v -timeout 3h -run TestFleet ./test/fleet/\n```\n\n",
		envNodes, r.cfg.nodes, envBudget, r.cfg.budget, envKills, r.cfg.kills, envIdle, r.cfg.idle)
	fmt.Fprintf(&b, "Machine: %s, %d CPUs, %s memory, Linux %s; kube-apiserver and etcd of hack/kubebin.sh (v1.37.2), one of each. %s.\n\n",
		host, runtime.NumCPU(), mib(float64(memTotal())), unix.ByteSliceToString(uts.Release[:]), time.Now().UTC().Format("2006-01-02"))
	b.WriteString("Every node: a real `hotplugd run` at nice 19 (2 CPUs, 4 GiB fixture machine, its own Node, --state-dir and log), " +
		fmt.Sprintf("`--remedy restart-kubelet` with a restart command that makes the test report the machine on the Node %v later (%v for %d slow nodes, twice the Lease), ", restartTime, slowRestartTime, len(r.slow)) +
		fmt.Sprintf("`--restart-budget %d --restart-budget-lease %v --restart-budget-poll %v`, every other flag its default (--heartbeat-interval %v, --settle %v, --resync 1m).\n\n",
			r.cfg.budget, budgetLease, budgetPoll, heartbeat, settle))

	b.WriteString("| phase | measure | value |\n|---|---|---|\n")
	row := func(phase, measure, format string, args ...any) {
		fmt.Fprintf(&b, "| %s | %s | %s |\n", phase, measure, fmt.Sprintf(format, args...))
	}
	row("setup", "nodes N, restart budget B, kills K, idle window", "%d, %d, %d, %v", r.cfg.nodes, r.cfg.budget, r.cfg.kills, r.cfg.idle)
	row("setup", "building hotplugd; laying out the machines; registering the Nodes", "%s; %s; %s", secs(r.build), secs(r.layout), secs(r.register))
	row("start-up", fmt.Sprintf("all N hotplugd started (%d at a time) and every condition False", wave), "%s (slowest node %s from its start; machine CPU %.0f%% busy)",
		secs(r.startup), secs(r.startupSlowest), 100*r.startupBusy)

	// Idle.
	idle := r.idle
	var total, writes float64
	for c, v := range r.idleRequests {
		total += v
		if c.writes() {
			writes += v
		}
	}
	row("idle", "window", "%s (the harness silent; hotplugd's requests counted by its own FlowSchemas)", secs(time.Duration(idle.seconds()*float64(time.Second))))
	row("idle", "hotplugd's requests per node per hour, all", "%.2f (writes %.2f)", perNodeHour(total, idle), perNodeHour(writes, idle))
	for _, c := range requestClasses() {
		if v := r.idleRequests[c]; v > 0 {
			row("idle", "  "+c.String()+" per node per hour", "%.2f", perNodeHour(v, idle))
		}
	}
	hb := r.idleRequests[requestClass{"patch", "nodes/status"}]
	note := ""
	if idle.seconds() < heartbeat.Seconds() {
		// Every hotplugd wrote its condition at its start, less than a
		// heartbeat interval before the window: none is due in it.
		note = "; the window is shorter than the interval: none due in it"
	}
	row("idle", "heartbeat: nodes/status patches per node per hour", "%.2f (expected 3600 s / %v = %.0f%s)", perNodeHour(hb, idle), heartbeat, time.Hour.Seconds()/heartbeat.Seconds(), note)
	row("idle", "hotplugd's requests rejected (429) by priority and fairness", "%.0f", r.idleRejected)
	row("idle", "API server requests per second, all clients (its own loops included)", "%.2f (baseline without hotplugd: %.2f)",
		idle.delta(mRequests, nil)/idle.seconds(), r.baseline.delta(mRequests, nil)/r.baseline.seconds())
	row("idle", "open watches (apiserver_longrunning_requests WATCH)", "%.0f, %.0f before hotplugd started: %.2f per node (%s)",
		r.watchesFleet, r.watchesBefore, (r.watchesFleet-r.watchesBefore)/n, watchDelta(r.baselineWatchesByResource, r.watchesByResource))
	row("idle", "API server RSS: no Nodes / N Nodes, no hotplugd / fleet idle", "%s / %s / %s", mib(r.rssEmpty), mib(r.rssNodes), mib(r.rssFleet))
	row("idle", "API server RSS per node: Node objects / with hotplugd", "%s / %s", kib((r.rssNodes-r.rssEmpty)/n), kib((r.rssFleet-r.rssNodes)/n))
	row("idle", "API server CPU (cores): baseline / fleet idle", "%.3f / %.3f", r.apiCPUBaseline, r.apiCPUIdle)
	row("idle", "hotplugd CPU per node", "%.2f s per hour (%.3f cores for the fleet)", r.hotplugdIdleCPU/n/(idle.seconds()/3600), r.hotplugdIdleCPU/idle.seconds())
	row("idle", "machine CPU busy (whatever else runs on it included)", "%.0f%%", 100*r.idleBusy)

	// The change.
	ch := r.change
	changeReq := hotplugdRequests(ch)
	var chWrites float64
	var chParts []string
	for _, c := range requestClasses() {
		if v := changeReq[c]; v > 0 {
			if c.writes() {
				chWrites += v
			}
			chParts = append(chParts, fmt.Sprintf("%s %.2f", c, v/n))
		}
	}
	row("change", "every machine's hugepages 0 -> 128Mi: writing the files", "%s", secs(r.changeWrite))
	row("change", "every Node KubeletCapacityStale True, from the change", "%s (median node %s, p99 %s)",
		secs(quantileOf(r.staleTimes, 1)), secs(quantileOf(r.staleTimes, 0.5)), secs(quantileOf(r.staleTimes, 0.99)))
	row("change", "hotplugd's writes per node until then", "%.2f (per node: %s)", chWrites/n, strings.Join(chParts, ", "))
	row("change", "API server mutating requests until then, all clients, per node", "%.2f", ch.delta(mRequests, mutating)/n)
	p99, cnt := ch.quantile(0.99, mutating)
	row("change", "API server p99 latency, mutating requests (SLO: <= 1 s)", "%s", bucket(p99, cnt))
	s, wb, wc := ch.worstQuantile(0.99, 20, mutating)
	row("change", "  worst series' p99 (>= 20 requests)", "%s: %s", s, bucket(wb, wc))

	// The remedy.
	rm := r.remedy
	remReq := hotplugdRequests(rm)
	var remTotal float64
	var remParts []string
	for _, c := range requestClasses() {
		if v := remReq[c]; v > 0 {
			remTotal += v
			remParts = append(remParts, fmt.Sprintf("%s %.2f", c, v/n))
		}
	}
	perNode := map[string]int{}
	for _, x := range r.restarts {
		perNode[x.node]++
	}
	hist := map[int]int{}
	for i := range r.cfg.nodes {
		hist[perNode[nodeName(i)]]++
	}
	var histParts []string
	for _, k := range slices.Sorted(func(yield func(int) bool) {
		for k := range hist {
			if !yield(k) {
				return
			}
		}
	}) {
		histParts = append(histParts, fmt.Sprintf("%d nodes %d", hist[k], k))
	}
	row("remedy", "every Node current (condition False, the new capacity and allocatable), from the change", "%s (median node %s, 99%% of nodes %s; bound %s)",
		secs(quantileOf(r.currentTimes, 1)), secs(quantileOf(r.currentTimes, 0.5)), secs(quantileOf(r.currentTimes, 0.99)), secs(r.currentBound))
	late := 0
	for _, d := range r.currentTimes {
		if d >= remedyInterval {
			late++
		}
	}
	row("remedy", "nodes current only after --remedy-interval (an attempt interrupted before its restart command, then rate limited)", "%d", late)
	row("remedy", "kubelet restarts; per node", "%d; %s", len(r.restarts), strings.Join(histParts, ", "))
	var took, startup []time.Duration
	for _, x := range r.restarts {
		if !x.end.IsZero() {
			took = append(took, x.end.Sub(x.start))
		}
		startup = append(startup, x.received.Sub(x.start))
	}
	slices.Sort(took)
	slices.Sort(startup)
	row("remedy", "a restart, from its helper's exec to the Node showing the machine", "median %s, max %s (the helper's own start-up: median %s, max %s)",
		secs(quantileOf(took, 0.5)), secs(quantileOf(took, 1)), secs(quantileOf(startup, 0.5)), secs(quantileOf(startup, 1)))
	row("remedy", "most restarts at once (budget B)", "%d (%d)", r.overlap.most, r.cfg.budget)
	row("remedy", "hotplugd SIGKILLed and started again 1 s later", "%d of %d (%s)", len(r.kills), r.cfg.kills, killSummary(r.kills))
	if r.slowKill != "" {
		row("remedy", "the kill during a restart that outlasts the Lease", "%s", r.slowKill)
	}
	row("remedy", "budget Leases", "%d", r.leases)
	row("remedy", "hotplugd's requests per node, change to current", "%.1f (%s)", remTotal/n, strings.Join(remParts, ", "))
	row("remedy", "Lease writes that lost a race (409: AlreadyExists, Conflict)", "%.0f of %.0f",
		rm.delta(mRequests, func(l map[string]string) bool { return l["resource"] == "leases" && l["code"] == "409" }),
		rm.delta(mRequests, func(l map[string]string) bool { return l["resource"] == "leases" && mutating(l) }))
	row("remedy", "hotplugd's requests rejected (429) by priority and fairness", "%.0f", hotplugdRejected(rm))
	row("remedy", "API server requests per second, all clients", "%.1f", rm.delta(mRequests, nil)/rm.seconds())
	p99, cnt = rm.quantile(0.99, mutating)
	row("remedy", "API server p99 latency, mutating requests (SLO: <= 1 s)", "%s", bucket(p99, cnt))
	s, wb, wc = rm.worstQuantile(0.99, 20, mutating)
	row("remedy", "  worst series' p99 (>= 20 requests)", "%s: %s", s, bucket(wb, wc))
	// Without the change's burst: the budget's own traffic, while the
	// remedy runs.
	after := window{r.change.b, rm.b}
	p99, cnt = after.quantile(0.99, mutating)
	row("remedy", "  the same once every Node showed the drift (the budget's traffic, without the change's burst)", "%s", bucket(p99, cnt))
	p99, cnt = rm.quantile(0.99, func(l map[string]string) bool { return l["verb"] == "GET" || l["verb"] == "LIST" })
	row("remedy", "API server p99 latency, GET and LIST (SLO: <= 1 s single object, <= 30 s list)", "%s", bucket(p99, cnt))
	row("remedy", "API server CPU (cores); per request, all clients", "%.2f; %.2f ms", rm.delta(mCPU, nil)/rm.seconds(), 1000*rm.delta(mCPU, nil)/max(rm.delta(mRequests, nil), 1))
	row("remedy", "machine CPU busy (whatever else runs on it included)", "%.0f%%", 100*r.remedyBusy)

	// The machine.
	h := r.hotplugd
	row("limits", "hotplugd processes at idle: RSS sum / PSS sum (binary shared)", "%s / %s (%s / %s per process)",
		mib(float64(h.rss)), mib(float64(h.pss)), mib(float64(h.rss)/float64(max(h.procs, 1))), mib(float64(h.pss)/float64(max(h.procs, 1))))
	row("limits", "hotplugd descriptors / threads, all processes", "%d / %d (%.1f / %.1f per process)", h.fds, h.threads,
		float64(h.fds)/float64(max(h.procs, 1)), float64(h.threads)/float64(max(h.procs, 1)))
	row("limits", "machine memory available: before / fleet idle", "%s / %s (%s used by the fleet and the API server)",
		mib(float64(r.memBefore)), mib(float64(r.memFleet)), mib(float64(r.memBefore)-float64(r.memFleet)))
	row("limits", "tasks (processes and threads) on the machine at idle; room before the fleet", "%d; %d (%s)", r.tasks, r.taskRoom, r.taskLimit)
	row("limits", "the test's descriptors (RLIMIT_NOFILE)", "%d (%d)", r.testFDs, r.nofile)
	row("limits", "fs.inotify.max_user_instances (2 per hotplugd)", "raised from %d to %d", r.inotifyWas, r.inotifyNow)
	row("limits", "highest 1-minute load average seen", "%.1f", r.load)
	row("all", "wall time of the test", "%s", secs(r.wall))
	b.WriteString("\nThe API server and etcd share this machine's CPUs with every hotplugd (at nice 19): when the whole fleet " +
		"reacts at once, they wait for CPU, so the latencies of the change's burst are the simulation's as much as the API " +
		"server's; its CPU per request is the figure that carries over to a control plane of its own.\n")
	return b.String()
}

func kib(b float64) string { return fmt.Sprintf("%.0f KiB", b/1024) }

// watchDelta says which resources' watches hotplugd added.
func watchDelta(before, after map[string]float64) string {
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range after {
			if !yield(k) {
				return
			}
		}
	}) {
		if d := after[k] - before[k]; d != 0 {
			parts = append(parts, fmt.Sprintf("%s %+.0f", k, d))
		}
	}
	if len(parts) == 0 {
		return "none added"
	}
	return strings.Join(parts, ", ")
}

func killSummary(ks []kill) string {
	why := map[string]int{}
	for _, k := range ks {
		why[k.why]++
	}
	var parts []string
	for _, k := range slices.Sorted(func(yield func(string) bool) {
		for k := range why {
			if !yield(k) {
				return
			}
		}
	}) {
		parts = append(parts, fmt.Sprintf("%s: %d", k, why[k]))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, "; ")
}
