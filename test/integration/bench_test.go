package integration

import (
	"cmp"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/internal/machinetest"
)

// BenchmarkDetectionLatency toggles cpu1 100 times and measures, for each
// toggle, the time from the sysfs write to the daemon's change log entry,
// minus the quiet window: what the daemon adds to the debounce it is asked
// to do. Goal: p99 at most 5 ms. The write itself blocks while the kernel
// takes the CPU down or up (tens of milliseconds here, before or after it
// sends the uevent), so the latency is reported from the write's return;
// the write's own duration is reported beside it.
//
// The latency is taken when the test reads the entry from the daemon's
// standard error (over-quiet), and from the entry's own time stamp
// (logged-over-quiet), which leaves out the pipe and the test's reader.
// Each toggle is split into stages (detectionStages) with the daemon's debug
// entry "reconcile timing"; the slowest toggles are logged with their
// stages and with what else the machine did meanwhile (load average, CPU
// busy and steal time, other hotplugd processes, the daemon's garbage
// collections): what a reader needs to tell where the tail comes from.
func BenchmarkDetectionLatency(b *testing.B) {
	m := machinetest.Acquire(b)
	m.SetCPUOnline(b, 1, true) // and back to its state at the end, whatever happens
	p := startDaemon(b, "--resync", "0")
	var samples []detectionStages
	machine := startMachineLoad(b, p)
	gcs := p.Metric("go_gc_duration_seconds_count")
	for b.Loop() {
		samples = samples[:0]
		online := true
		for i := 0; i < 100; i++ {
			old, new, value := "2", "1", "0"
			if !online {
				old, new, value = "1", "2", "1"
			}
			mark := p.Mark()
			begin := time.Now()
			if err := writeFile("/sys/devices/system/cpu/cpu1/online", value); err != nil {
				b.Fatal(err)
			}
			start := time.Now()
			online = !online
			e, ok := p.WaitForFrom(mark, quiet+5*time.Second, isChange("cpu", old, new))
			if !ok {
				b.Fatalf("toggle %d: no change %s -> %s", i, old, new)
			}
			logged := entryTime(e, "ts")
			timing, ok := p.WaitForFrom(mark, 5*time.Second, func(t logEntry) bool {
				return t.Msg == "reconcile timing" && !entryTime(t, "reported").Before(logged)
			})
			if !ok {
				b.Fatalf("toggle %d: no reconcile timing after the change", i)
			}
			samples = append(samples, newDetectionStages(i, value, begin, start, e, timing))
		}
		if !online {
			writeFile("/sys/devices/system/cpu/cpu1/online", "1")
		}
	}
	load := machine.end(b)
	gcs = p.Metric("go_gc_duration_seconds_count") - gcs

	sorted := func(f func(detectionStages) time.Duration) []time.Duration {
		out := make([]time.Duration, len(samples))
		for i, s := range samples {
			out[i] = f(s)
		}
		slices.Sort(out)
		return out
	}
	lat := sorted(func(s detectionStages) time.Duration { return s.Total })
	logged := sorted(func(s detectionStages) time.Duration { return s.Total - s.Pipe })
	writes := sorted(func(s detectionStages) time.Duration { return s.Write })
	late := sorted(func(s detectionStages) time.Duration { return s.Late })
	b.ReportMetric(ms(percentile(lat, 50)), "p50-ms-over-quiet")
	b.ReportMetric(ms(percentile(lat, 99)), "p99-ms-over-quiet")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms-over-quiet")
	b.ReportMetric(ms(percentile(logged, 99)), "p99-ms-logged-over-quiet")
	b.ReportMetric(ms(logged[len(logged)-1]), "max-ms-logged-over-quiet")
	b.ReportMetric(ms(percentile(writes, 50)), "p50-ms-sysfs-write")
	b.ReportMetric(ms(percentile(writes, 99)), "p99-ms-sysfs-write")
	b.ReportMetric(ms(percentile(late, 99)), "p99-ms-timer-late")
	b.ReportMetric(gcs, "daemon-gcs")
	b.ReportMetric(load.Busy*100, "machine-busy-%")

	// The slowest toggles with their stages, then each stage's median and
	// maximum over all toggles (those rows need not add up).
	slices.SortFunc(samples, func(x, y detectionStages) int { return cmp.Compare(y.Total, x.Total) })
	var t strings.Builder
	fmt.Fprintf(&t, "%d toggles; load average %.2f at the start; CPUs busy %.0f%% and stolen %.1f%% of the run; %d other hotplugd processes; %v daemon GCs\n",
		len(samples), load.Average, load.Busy*100, load.Steal*100, load.Others, gcs)
	fmt.Fprintf(&t, "ms over quiet: %s = %s (the daemon: read the uevent, due, started late, read, diffed, logged) + %s (pipe and test reader); write not in total\n",
		"total", "uevent + window + late + read + diff + log", "pipe")
	fmt.Fprintf(&t, "%-12s %8s %8s %8s %8s %8s %8s %8s %8s %8s\n", "toggle", "total", "write", "uevent", "window", "late", "read", "diff", "log", "pipe")
	row := func(name string, s detectionStages) {
		fmt.Fprintf(&t, "%-12s %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f %8.3f\n", name, ms(s.Total), ms(s.Write), ms(s.Uevent),
			ms(s.Window), ms(s.Late), ms(s.Read), ms(s.Diff), ms(s.Log), ms(s.Pipe))
	}
	for _, s := range samples[:min(5, len(samples))] {
		row(fmt.Sprintf("#%d %s", s.Toggle, map[string]string{"0": "off", "1": "on"}[s.Value]), s)
	}
	for _, q := range []struct {
		name string
		pick func([]time.Duration) time.Duration
	}{
		{"p50 each", func(d []time.Duration) time.Duration { return percentile(d, 50) }},
		{"max each", func(d []time.Duration) time.Duration { return d[len(d)-1] }},
	} {
		each := func(f func(detectionStages) time.Duration) time.Duration { return q.pick(sorted(f)) }
		row(q.name, detectionStages{
			Total:  q.pick(lat),
			Write:  q.pick(writes),
			Uevent: each(func(s detectionStages) time.Duration { return s.Uevent }),
			Window: each(func(s detectionStages) time.Duration { return s.Window }),
			Late:   q.pick(late),
			Read:   each(func(s detectionStages) time.Duration { return s.Read }),
			Diff:   each(func(s detectionStages) time.Duration { return s.Diff }),
			Log:    each(func(s detectionStages) time.Duration { return s.Log }),
			Pipe:   each(func(s detectionStages) time.Duration { return s.Pipe }),
		})
	}
	b.Log("detection latency:\n" + t.String())
}

// detectionStages splits one toggle's latency over the quiet window (Total:
// the change entry read by the test, minus the write's return, minus the
// quiet window) into what happened in between, from the daemon's
// "reconcile timing" entry and the change entry's own time stamp (the
// daemon's and the test's clock are the machine's). The stages add up to
// Total: Uevent + Window + Late + Read + Diff + Log + Pipe.
type detectionStages struct {
	Toggle int
	Value  string // what was written: "0" offline, "1" online
	Total  time.Duration
	// Write is how long the sysfs write blocked (not part of Total).
	Write time.Duration
	// Uevent is from the write's return to the batch's last trigger, when
	// the daemon read the uevent: negative when it did before the write
	// returned.
	Uevent time.Duration
	// Window is the debounce window beyond the quiet window: non-zero
	// only when the batch was cut at the maximum delay.
	Window time.Duration
	// Late is from the batch being due to the reconcile's start: the
	// debounce timer firing late (the Go runtime's timers have a
	// resolution of 1 ms here) and the wake-up of its thread.
	Late time.Duration
	// Read is the rescan of the hugepage files and the topology's read.
	Read time.Duration
	// Diff is the diff with the last snapshot.
	Diff time.Duration
	// Log is from the diff to the change entry's time stamp (metrics,
	// the entry's fields).
	Log time.Duration
	// Pipe is from the change entry's time stamp to the test reading it:
	// its encoding, the write to the pipe and the wake-up of the test's
	// reader.
	Pipe time.Duration
}

func newDetectionStages(toggle int, value string, begin, start time.Time, change, timing logEntry) detectionStages {
	last, due := entryTime(timing, "last_trigger"), entryTime(timing, "due")
	began := due.Add(entryDuration(timing, "late"))
	read := began.Add(entryDuration(timing, "read"))
	diffed := read.Add(entryDuration(timing, "diff"))
	logged := entryTime(change, "ts")
	return detectionStages{
		Toggle: toggle,
		Value:  value,
		Total:  change.Time.Sub(start) - quiet,
		Write:  start.Sub(begin),
		Uevent: last.Sub(start),
		Window: due.Sub(last) - quiet,
		Late:   began.Sub(due),
		Read:   read.Sub(began),
		Diff:   diffed.Sub(read),
		Log:    logged.Sub(diffed),
		Pipe:   change.Time.Sub(logged),
	}
}

// entryTime is a time field of a JSON log entry (seconds since the epoch).
func entryTime(e logEntry, key string) time.Time {
	f, _ := e.Fields[key].(float64)
	sec, frac := math.Modf(f)
	return time.Unix(int64(sec), int64(math.Round(frac*1e9)))
}

// entryDuration is a duration field of a JSON log entry (seconds).
func entryDuration(e logEntry, key string) time.Duration {
	f, _ := e.Fields[key].(float64)
	return time.Duration(math.Round(f * 1e9))
}

// percentile is the nearest-rank p-th percentile of sorted: with 100
// samples the 99th is the second largest, not the largest.
func percentile(sorted []time.Duration, p int) time.Duration {
	i := (len(sorted)*p+99)/100 - 1
	return sorted[max(i, 0)]
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// machineLoad is what the machine did besides the benchmark, for reading
// its latencies.
type machineLoad struct {
	// Average is the 1-minute load average at the start (it lags: it
	// still shows the daemon's build).
	Average float64
	// Busy and Steal are the fractions of the online CPUs' time spent
	// busy (anything but idle and I/O wait; the benchmark's own work
	// included) and stolen by the hypervisor during the run.
	Busy, Steal float64
	// Others counts the other processes whose name starts with hotplugd:
	// each of them gets the same uevents and reconciles at the same moment
	// as the benchmark's daemon.
	Others int

	stat []uint64
}

func startMachineLoad(b *testing.B, p *daemonProc) *machineLoad {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		b.Fatal(err)
	}
	avg, err := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	if err != nil {
		b.Fatal(err)
	}
	l := &machineLoad{Average: avg, stat: cpuTimes(b)}
	comms, _ := filepath.Glob("/proc/[0-9]*/comm")
	for _, c := range comms {
		if data, err := os.ReadFile(c); err == nil && strings.HasPrefix(string(data), "hotplugd") &&
			c != fmt.Sprintf("/proc/%d/comm", p.Cmd.Process.Pid) {
			l.Others++
		}
	}
	return l
}

func (l *machineLoad) end(b *testing.B) machineLoad {
	now := cpuTimes(b)
	var total, idle, steal uint64
	for i := range now {
		d := now[i] - l.stat[i]
		total += d
		switch i {
		case 3, 4: // idle, iowait
			idle += d
		case 7:
			steal = d
		}
	}
	if total > 0 {
		l.Busy = float64(total-idle) / float64(total)
		l.Steal = float64(steal) / float64(total)
	}
	return *l
}

// cpuTimes is the first line of /proc/stat: user, nice, system, idle,
// iowait, irq, softirq, steal (guest time is within user and nice).
func cpuTimes(b *testing.B) []uint64 {
	data, err := os.ReadFile("/proc/stat")
	if err != nil {
		b.Fatal(err)
	}
	line, _, _ := strings.Cut(string(data), "\n")
	f := strings.Fields(line)
	if len(f) < 9 || f[0] != "cpu" {
		b.Fatalf("/proc/stat: unexpected first line %q", line)
	}
	out := make([]uint64, 8)
	for i := range out {
		if out[i], err = strconv.ParseUint(f[i+1], 10, 64); err != nil {
			b.Fatalf("/proc/stat: %v", err)
		}
	}
	return out
}

// BenchmarkBurstReconciles sends bursts of 10 000 synthetic memory uevents
// and reports the reconciles each burst caused. Goal: 1.
func BenchmarkBurstReconciles(b *testing.B) {
	machinetest.Acquire(b)
	p := startDaemon(b, "--resync", "0")
	files := daemontest.MemoryBlocks(b)
	var bursts, reconciles, received, writeTime float64
	for b.Loop() {
		before := p.Metric(`hotplugd_reconciles_total{trigger="uevent"}`)
		events := p.Metric(`hotplugd_uevents_total{action="online",subsystem="memory"}`)
		start := time.Now()
		daemontest.SyntheticUevents(b, files, 10000)
		writeTime += time.Since(start).Seconds()
		time.Sleep(quiet + time.Second)
		reconciles += p.Metric(`hotplugd_reconciles_total{trigger="uevent"}`) - before
		received += p.Metric(`hotplugd_uevents_total{action="online",subsystem="memory"}`) - events
		bursts++
	}
	b.ReportMetric(reconciles/bursts, "reconciles/burst")
	b.ReportMetric(received/bursts, "events-received/burst")
	b.ReportMetric(writeTime/bursts*1000, "burst-write-ms")
}

// BenchmarkIdle measures the daemon at idle (standalone, --resync 1m): its
// RSS and what it does between resyncs, after its start-up and again after
// a change. Goals: RSS at most 20 MiB at each point, no reads between
// resyncs, 0 wake-ups per second.
//
//   - After start-up: read syscalls and context switches (wake-ups) between
//     5 s and 59 s, just before the first resync (60 s), and the RSS at
//     59 s: whole, anonymous (heap, stacks), file-backed (the binary's
//     pages, shared with every process that maps it), and the binary's
//     text and read-only data (code; types, strings and the pclntab).
//   - After a change: cpu1 offline and back online at 62 s (two changes,
//     each re-read and logged), then the wake-ups from 5 s after it to
//     119 s and the RSS at 119 s (-after-change).
//   - After a long idle, only with HOTPLUGD_BENCH_IDLE_LONG=<duration>
//     (e.g. 1h; give go test a -timeout beyond it): the RSS just before the
//     last resync of that time, and the wake-ups over it, resyncs included
//     (-long-idle).
//
// Then one scrape of /metrics: the Go heap and stacks in use, and the RSS
// after it (a Prometheus scrape touches the HTTP server's and the
// encoder's pages). Almost all of the file-backed RSS is pages of the
// binary touched at start-up (package initialisation) and mapped with their
// neighbours (the kernel maps up to 64 KiB around each page fault of a
// file): each package linked that runs code at start costs memory whether
// it is used or not (pkg/kubeclient says what that meant for client-go).
func BenchmarkIdle(b *testing.B) {
	if os.Getenv("HOTPLUGD_BENCH_IDLE") == "0" {
		b.Skip("HOTPLUGD_BENCH_IDLE=0")
	}
	benchIdle(b, func() (*daemonProc, time.Time, func(online bool)) {
		return startDaemon(b, "--resync", "1m"), time.Now(), func(bool) {}
	})
}

// BenchmarkIdleCluster is BenchmarkIdle with a cluster, as the daemon runs
// on a node: a real API server, its Node, the kubelet's configuration,
// reporting (no remedy). Its change is a drift, reported on the Node (a
// patch and an Event), then cleared. On top of the standalone daemon it
// holds the API client's code (TLS, HTTP/2, the Node's decoding), the
// informer's Node and its connection's buffers.
func BenchmarkIdleCluster(b *testing.B) {
	if os.Getenv("HOTPLUGD_BENCH_IDLE") == "0" {
		b.Skip("HOTPLUGD_BENCH_IDLE=0")
	}
	srv := sharedAPIServer(b)
	c, cfg, node, kc := matchingNode(b, srv, "idle")
	benchIdle(b, func() (*daemonProc, time.Time, func(online bool)) {
		p := startClusterDaemon(b, "--node-name", node, "--kubeconfig", kc, "--kubelet-config", cfg, "--resync", "1m")
		started := time.Now()
		waitCondition(b, c, node, v1.ConditionFalse, 10*time.Second)
		return p, started, func(online bool) {
			// Offline is a drift (the kubelet reports 2 CPUs), online clears it.
			want := v1.ConditionTrue
			if online {
				want = v1.ConditionFalse
			}
			waitCondition(b, c, node, want, 10*time.Second)
		}
	})
}

// benchIdle measures what BenchmarkIdle says of the daemon start returns,
// started when it was, with reported called after each change is logged
// (with whether cpu1 is online again) to wait for what else it does.
func benchIdle(b *testing.B, start func() (p *daemonProc, started time.Time, reported func(online bool))) {
	var long time.Duration
	if v := os.Getenv("HOTPLUGD_BENCH_IDLE_LONG"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			b.Fatalf("HOTPLUGD_BENCH_IDLE_LONG=%q: want a positive duration (1h)", v)
		}
		long = d
	}
	m := machinetest.Acquire(b) // nothing else may change the machine meanwhile
	m.SetCPUOnline(b, 1, true)  // and back to its state at the end
	for b.Loop() {
		p, started, reported := start()
		pid := p.Cmd.Process.Pid
		at := func(d time.Duration) { time.Sleep(time.Until(started.Add(d))) }

		at(5 * time.Second) // start-up done
		r0, w0 := procReads(b, pid), procSwitches(b, pid)
		at(59 * time.Second) // just before the first resync
		r1, w1 := procReads(b, pid), procSwitches(b, pid)
		reportRSS(b, pid, "")
		text, rodata := procBinaryRSS(b, pid, p.Cmd.Path)
		b.ReportMetric(float64(text)/(1<<20), "rss-text-MiB")
		b.ReportMetric(float64(rodata)/(1<<20), "rss-rodata-MiB")
		b.ReportMetric(float64(r1-r0), "reads-between-resyncs")
		b.ReportMetric(float64(w1-w0)/54, "wakeups/s")

		at(62 * time.Second)
		for _, c := range []struct {
			value, old, new string
		}{{"0", "2", "1"}, {"1", "1", "2"}} {
			mark := p.Mark()
			if err := writeFile("/sys/devices/system/cpu/cpu1/online", c.value); err != nil {
				b.Fatal(err)
			}
			if _, ok := p.WaitForFrom(mark, quiet+5*time.Second, isChange("cpu", c.old, c.new)); !ok {
				b.Fatalf("no change cpu %s -> %s", c.old, c.new)
			}
			reported(c.value == "1")
		}
		from := time.Since(started) + 5*time.Second
		at(from)
		w0 = procSwitches(b, pid)
		at(119 * time.Second) // just before the second resync
		w1 = procSwitches(b, pid)
		reportRSS(b, pid, "-after-change")
		b.ReportMetric(float64(w1-w0)/(119*time.Second-from).Seconds(), "wakeups/s-after-change")

		if long > 0 {
			// Just before the last resync of the long idle.
			end := (119*time.Second + long).Truncate(time.Minute) - time.Second
			b.Logf("idle until %v after the start (HOTPLUGD_BENCH_IDLE_LONG=%v)", end, long)
			at(end)
			w2 := procSwitches(b, pid)
			reportRSS(b, pid, "-after-long-idle")
			b.ReportMetric(float64(w2-w1)/(end-119*time.Second).Seconds(), "wakeups/s-long-idle")
		}

		b.ReportMetric(procCPU(b, pid).Seconds()*1000, "cpu-ms-total")
		b.ReportMetric(float64(procCPUNanos(b, pid))/1e6, "cpu-ms-total-schedstat")
		b.ReportMetric(p.Metric("go_memstats_heap_inuse_bytes")/(1<<20), "go-heap-inuse-MiB")
		b.ReportMetric(p.Metric("go_memstats_stack_inuse_bytes")/(1<<20), "go-stack-inuse-MiB")
		b.ReportMetric(float64(procRSS(b, pid))/(1<<20), "rss-after-scrape-MiB")
		p.Stop()
	}
}

// reportRSS reports the process's RSS, whole, anonymous and file-backed,
// with suffix after "rss".
func reportRSS(b *testing.B, pid int, suffix string) {
	status := fmt.Sprintf("/proc/%d/status", pid)
	b.ReportMetric(float64(procRSS(b, pid))/(1<<20), "rss"+suffix+"-MiB")
	b.ReportMetric(float64(procField(b, status, "RssAnon:"))/1024, "rss-anon"+suffix+"-MiB")
	b.ReportMetric(float64(procField(b, status, "RssFile:"))/1024, "rss-file"+suffix+"-MiB")
}

// procBinaryRSS is the resident bytes of binary's text (r-xp) and
// read-only data (r--p: types, strings, the pclntab) mappings
// (/proc/PID/smaps).
func procBinaryRSS(b *testing.B, pid int, binary string) (text, rodata int64) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/smaps", pid))
	if err != nil {
		b.Fatal(err)
	}
	var cur *int64
	for _, line := range strings.Split(string(data), "\n") {
		f := strings.Fields(line)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-") && !strings.HasSuffix(f[0], ":"):
			cur = nil
			if len(f) == 6 && f[5] == binary {
				switch f[1] {
				case "r-xp":
					cur = &text
				case "r--p":
					cur = &rodata
				}
			}
		case cur != nil && len(f) == 3 && f[0] == "Rss:":
			v, err := strconv.ParseInt(f[1], 10, 64)
			if err != nil {
				b.Fatalf("smaps: %q: %v", line, err)
			}
			*cur += v * 1024
		}
	}
	if text == 0 {
		b.Fatalf("/proc/%d/smaps: no text mapping of %s", pid, binary)
	}
	return text, rodata
}

// procReads is the number of read syscalls the process made (/proc/PID/io syscr).
func procReads(b *testing.B, pid int) int64 {
	return procField(b, fmt.Sprintf("/proc/%d/io", pid), "syscr:")
}

// procRSS is the resident set size in bytes.
func procRSS(b *testing.B, pid int) int64 {
	return procField(b, fmt.Sprintf("/proc/%d/status", pid), "VmRSS:") * 1024
}

// procSwitches sums the context switches of every thread of the process.
func procSwitches(b *testing.B, pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/status", pid))
	var n int64
	for _, t := range tasks {
		n += procField(b, t, "voluntary_ctxt_switches:") + procField(b, t, "nonvoluntary_ctxt_switches:")
	}
	return n
}

// procCPU is user + system CPU time (/proc/PID/stat fields 14 and 15).
func procCPU(b *testing.B, pid int) time.Duration {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		b.Fatal(err)
	}
	fields := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+2:]))
	utime, _ := strconv.ParseInt(fields[11], 10, 64)
	stime, _ := strconv.ParseInt(fields[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// procCPUNanos sums the time every thread of the process spent on a CPU,
// in nanoseconds (/proc/PID/task/*/schedstat, first field): finer than the
// 10 ms ticks of /proc/PID/stat.
func procCPUNanos(b *testing.B, pid int) int64 {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/schedstat", pid))
	var n int64
	for _, t := range tasks {
		data, err := os.ReadFile(t)
		if err != nil {
			continue // the thread exited
		}
		if f := strings.Fields(string(data)); len(f) > 0 {
			v, _ := strconv.ParseInt(f[0], 10, 64)
			n += v
		}
	}
	return n
}

func procField(b *testing.B, path, key string) int64 {
	data, err := os.ReadFile(path)
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if rest, ok := strings.CutPrefix(line, key); ok {
			f := strings.Fields(rest)
			if len(f) > 0 {
				v, err := strconv.ParseInt(f[0], 10, 64)
				if err != nil {
					b.Fatalf("%s %s: %v", path, key, err)
				}
				return v
			}
		}
	}
	b.Fatalf("%s: no %s", path, key)
	return 0
}

// BenchmarkNodeAPIRequests counts the requests hotplugd makes to a real API
// server (report mode, the kubelet's configuration known): at idle, over
// 10 s after start-up beyond the watch, and per settled change, over cpu1
// going offline (drift: condition True, annotations, Event) and back
// (condition False, annotations). Goals: 0 at idle, at most 3 writes per
// change.
func BenchmarkNodeAPIRequests(b *testing.B) {
	m := machinetest.Acquire(b)
	m.SetCPUOnline(b, 1, true)
	c, cfg, node, kc := matchingNode(b, sharedAPIServer(b), "bench")
	p := startClusterDaemon(b, "--node-name", node, "--kubeconfig", kc, "--kubelet-config", cfg)
	waitCondition(b, c, node, v1.ConditionFalse, 5*time.Second)
	time.Sleep(time.Second)

	var idle, changes, writes, requests float64
	for b.Loop() {
		before := p.Requests()
		time.Sleep(10 * time.Second)
		idle = p.Requests().Total() - before.Total()

		for _, online := range []bool{false, true} {
			before := p.Requests()
			m.SetCPUOnline(b, 1, online)
			status := v1.ConditionTrue
			if online {
				status = v1.ConditionFalse
			}
			waitCondition(b, c, node, status, 10*time.Second)
			time.Sleep(2 * time.Second) // the Event is sent asynchronously
			after := p.Requests()
			changes++
			writes += after.Writes() - before.Writes()
			requests += after.Total() - before.Total()
		}
	}
	if idle != 0 {
		b.Errorf("%v requests at idle, want 0", idle)
	}
	if writes/changes > 3 {
		b.Errorf("%v writes per change, want at most 3", writes/changes)
	}
	b.ReportMetric(idle, "requests-idle-10s")
	b.ReportMetric(writes/changes, "writes/change")
	b.ReportMetric(requests/changes, "requests/change")
}
