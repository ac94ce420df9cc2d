package cpuonline

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"

	"github.com/hotplugd/hotplugd/pkg/uevent"
)

// Options configure an Onliner.
type Options struct {
	// SysfsRoot is where sysfs is mounted; "" means /sys.
	SysfsRoot string
	// Log receives one entry per CPU onlined or failed; nil: no logs.
	Log *zap.Logger
	// Registerer, when set, gets the metric hotplugd_cpu_onlines_total.
	Registerer prometheus.Registerer
}

// Result labels of hotplugd_cpu_onlines_total.
const (
	// ResultOnlined: the online file read "0" and "1" was written.
	ResultOnlined = "onlined"
	// ResultAlreadyOnline: the online file read "1" (something else, such
	// as udev, was faster); nothing was written.
	ResultAlreadyOnline = "already_online"
	// ResultFailed: reading or writing the online file failed.
	ResultFailed = "failed"
)

// Onliner onlines the CPUs that hot-add uevents name. Its methods are safe
// for concurrent use.
type Onliner struct {
	sys     string
	log     *zap.Logger
	onlines *prometheus.CounterVec

	mu      sync.Mutex
	pending []int // CPU numbers, in arrival order, without duplicates
	wake    chan struct{}

	// write writes "1" to an online file; tests replace it to make a
	// write fail (root writes any regular file).
	write func(file string) error
}

// New returns an Onliner. It fails only when the metric cannot be
// registered.
func New(o Options) (*Onliner, error) {
	if o.SysfsRoot == "" {
		o.SysfsRoot = "/sys"
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	on := &Onliner{
		sys: filepath.Clean(o.SysfsRoot),
		log: o.Log,
		onlines: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotplugd_cpu_onlines_total",
			Help: "Hot-added CPUs hotplugd brought online (--online-new-cpus), by result: onlined, already_online, failed.",
		}, []string{"result"}),
		wake:  make(chan struct{}, 1),
		write: writeOne,
	}
	for _, r := range []string{ResultOnlined, ResultAlreadyOnline, ResultFailed} {
		on.onlines.WithLabelValues(r) // export zeros
	}
	if o.Registerer != nil {
		if err := o.Registerer.Register(on.onlines); err != nil {
			return nil, fmt.Errorf("cpuonline: register metrics: %w", err)
		}
	}
	return on, nil
}

// Event queues the CPU that e hot-added, if it is a real `add` of a CPU;
// every other event is ignored. It never blocks: it is called from the
// uevent reader (daemon.AddUeventHook).
func (o *Onliner) Event(e uevent.Event) {
	cpu, ok := HotAdded(e)
	if !ok {
		return
	}
	o.mu.Lock()
	if !slices.Contains(o.pending, cpu) {
		o.pending = append(o.pending, cpu)
	}
	o.mu.Unlock()
	select {
	case o.wake <- struct{}{}:
	default:
	}
}

// Run onlines the queued CPUs until ctx is done. It returns nil: failures
// are logged and counted, not returned.
func (o *Onliner) Run(ctx context.Context) error {
	for {
		o.mu.Lock()
		cpus := o.pending
		o.pending = nil
		o.mu.Unlock()
		for _, cpu := range cpus {
			o.Online(cpu)
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.wake:
		}
	}
}

// Online brings cpu online if its online file reads "0", logs what it did
// and counts it, and returns the result label.
func (o *Onliner) Online(cpu int) string {
	start := time.Now()
	file := o.onlinePath(cpu)
	wrote, err := o.online(file)
	switch {
	case err != nil:
		o.onlines.WithLabelValues(ResultFailed).Inc()
		o.log.Error("cannot online the hot-added CPU; it stays offline until something writes 1 to its online file",
			zap.Int("cpu", cpu), zap.String("path", file), zap.Error(err))
		return ResultFailed
	case !wrote:
		o.onlines.WithLabelValues(ResultAlreadyOnline).Inc()
		o.log.Info("hot-added CPU already online", zap.Int("cpu", cpu))
		return ResultAlreadyOnline
	default:
		o.onlines.WithLabelValues(ResultOnlined).Inc()
		o.log.Info("onlined hot-added CPU", zap.Int("cpu", cpu), zap.String("path", file),
			zap.Duration("took", time.Since(start)))
		return ResultOnlined
	}
}

func (o *Onliner) onlinePath(cpu int) string {
	return filepath.Join(o.sys, "devices", "system", "cpu", "cpu"+strconv.Itoa(cpu), "online")
}

// HotAdded returns the number of the CPU a uevent reports hot-added: a
// real (not synthetic) `add` of the cpu subsystem for
// /devices/system/cpu/cpuN.
func HotAdded(e uevent.Event) (int, bool) {
	if e.Subsystem != "cpu" || e.Action != uevent.ActionAdd || e.Synthetic {
		return 0, false
	}
	if path.Dir(e.DevPath) != "/devices/system/cpu" {
		return 0, false
	}
	n, ok := strings.CutPrefix(path.Base(e.DevPath), "cpu")
	if !ok {
		return 0, false
	}
	cpu, err := strconv.Atoi(n)
	if err != nil || cpu < 0 || strconv.Itoa(cpu) != n {
		return 0, false
	}
	return cpu, true
}

// maxFileSize caps the read of an online file ("0\n" or "1\n").
const maxFileSize = 64

// online writes "1" to the online file if it reads "0", and reports
// whether it wrote.
func (o *Onliner) online(file string) (bool, error) {
	f, err := os.Open(file)
	if err != nil {
		return false, fmt.Errorf("cpuonline: %w", err)
	}
	b, err := io.ReadAll(io.LimitReader(f, maxFileSize))
	f.Close()
	if err != nil {
		return false, fmt.Errorf("cpuonline: %w", err) // a *PathError: op and path
	}
	switch v := string(bytes.TrimSpace(b)); v {
	case "1":
		return false, nil
	case "0":
	default:
		return false, fmt.Errorf("cpuonline: read %s: %q is neither 0 nor 1", file, v)
	}
	if err := o.write(file); err != nil {
		return false, fmt.Errorf("cpuonline: %w", err)
	}
	return true, nil
}

// writeOne writes "1" to a sysfs attribute: one write(2) at offset 0, no
// truncation (sysfs ignores it; a regular fixture file keeps its newline).
// The kernel onlines the CPU before write returns. Errors are *PathErrors.
func writeOne(file string) error {
	f, err := os.OpenFile(file, os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.Write([]byte("1")); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
