package integration

import (
	"fmt"
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
func BenchmarkDetectionLatency(b *testing.B) {
	m := machinetest.Acquire(b)
	m.SetCPUOnline(b, 1, true) // and back to its state at the end, whatever happens
	p := startDaemon(b, "--resync", "0")
	var lat, writes []time.Duration
	for b.Loop() {
		lat, writes = lat[:0], writes[:0]
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
			writes = append(writes, start.Sub(begin))
			online = !online
			e, ok := p.WaitForFrom(mark, quiet+5*time.Second, isChange("cpu", old, new))
			if !ok {
				b.Fatalf("toggle %d: no change %s -> %s", i, old, new)
			}
			lat = append(lat, e.Time.Sub(start)-quiet)
		}
		if !online {
			writeFile("/sys/devices/system/cpu/cpu1/online", "1")
		}
	}
	slices.Sort(lat)
	slices.Sort(writes)
	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	b.ReportMetric(ms(lat[len(lat)/2]), "p50-ms-over-quiet")
	b.ReportMetric(ms(lat[len(lat)*99/100]), "p99-ms-over-quiet")
	b.ReportMetric(ms(lat[len(lat)-1]), "max-ms-over-quiet")
	b.ReportMetric(ms(writes[len(writes)/2]), "p50-ms-sysfs-write")
	b.ReportMetric(ms(writes[len(writes)*99/100]), "p99-ms-sysfs-write")
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

// BenchmarkIdle runs the daemon for 60 s with nothing happening and reports
// its RSS and CPU time at the end, and what it did between its start-up and
// the first resync (due at 60 s): read syscalls and context switches
// (wake-ups). Goals: RSS at most 20 MiB, no reads between resyncs. RSS is
// reported whole and split: anonymous memory (heap, stacks) and the
// file-backed pages of the binary it touched (rss-file-MiB; since client-go
// is linked, about 20 MiB of a 31 MB binary, mostly touched by the package
// initialisation of client-go and the Kubernetes API types).
func BenchmarkIdle(b *testing.B) {
	if os.Getenv("HOTPLUGD_BENCH_IDLE") == "0" {
		b.Skip("HOTPLUGD_BENCH_IDLE=0")
	}
	machinetest.Acquire(b) // nothing else may change the machine meanwhile
	for b.Loop() {
		p := startDaemon(b, "--resync", "1m")
		pid := p.Cmd.Process.Pid
		time.Sleep(5 * time.Second) // start-up done
		r0, w0 := procReads(b, pid), procSwitches(b, pid)
		time.Sleep(54 * time.Second) // up to just before the resync at 60 s
		r1, w1 := procReads(b, pid), procSwitches(b, pid)
		b.ReportMetric(float64(procRSS(b, pid))/(1<<20), "rss-MiB")
		status := fmt.Sprintf("/proc/%d/status", pid)
		b.ReportMetric(float64(procField(b, status, "RssAnon:"))/1024, "rss-anon-MiB")
		b.ReportMetric(float64(procField(b, status, "RssFile:"))/1024, "rss-file-MiB")
		b.ReportMetric(procCPU(b, pid).Seconds()*1000, "cpu-ms-total")
		b.ReportMetric(float64(procCPUNanos(b, pid))/1e6, "cpu-ms-total-schedstat")
		b.ReportMetric(float64(r1-r0), "reads-between-resyncs")
		b.ReportMetric(float64(w1-w0)/54, "wakeups/s")
		p.Stop()
	}
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
