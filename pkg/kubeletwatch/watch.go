package kubeletwatch

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/fsnotify/fsnotify"
	"go.uber.org/zap"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

// Facts are what hotplugd knows about the kubelet at one moment.
type Facts struct {
	// Kubelet is the discovered kubelet (its effective configuration,
	// root dir, health endpoint); nil when none was found.
	Kubelet *kubeletconfig.Kubelet
	// Start is the kubelet process's start time (clock ticks since boot,
	// /proc/<pid>/stat), 0 without a process.
	Start uint64
	// Started is that start as a time (zero when unknown).
	Started time.Time
	// Version is the kubelet's version as found (zero when none was), and
	// VersionFrom says from where.
	Version     kubeletversion.Version
	VersionFrom string
	// Release is the release row hotplugd predicts and repairs by; nil
	// when the version is unknown.
	Release *kubeletversion.Release
	// StateDir is the kubelet's root dir as hotplugd reaches it; "" when it
	// cannot (then no remedy).
	StateDir string
	// ConfigChanged is true when a configuration file was written after
	// the kubelet process started: the running kubelet does not use what
	// is on disk, so its allocatable cannot be predicted from it.
	ConfigChanged bool
	// Limits say why the facts are narrower than usual, for the log and
	// the Node's condition: no kubelet, an unknown version, a root dir
	// hotplugd cannot reach, a configuration edited since the start.
	Limits []string
	// Err is the discovery's error, when it failed (then Kubelet is nil).
	Err error
}

// Config is the kubelet's effective configuration when allocatable can be
// predicted from it (a kubelet of a known release whose configuration on
// disk is the one it runs with), else nil: capacity only.
func (f *Facts) Config() *kubeletv1beta1.KubeletConfiguration {
	if f == nil || f.Kubelet == nil || f.Release == nil || f.ConfigChanged {
		return nil
	}
	return f.Kubelet.Config
}

// Remediable reports whether the kubelet may be restarted with repaired
// state files: known, of a known release, its state files reachable. Why
// not is in Limits.
func (f *Facts) Remediable() bool {
	return f != nil && f.Kubelet != nil && f.Release != nil && f.StateDir != ""
}

// Limit joins Limits for a message ("" when none).
func (f *Facts) Limit() string {
	if f == nil {
		return ""
	}
	return strings.Join(f.Limits, "; ")
}

// Fingerprint identifies the kubelet's start-up behavior: the same
// fingerprint, the same kubelet configuration and release. "" without a
// kubelet.
func (f *Facts) Fingerprint() string {
	if f == nil || f.Kubelet == nil {
		return ""
	}
	rel := "unknown"
	if f.Release != nil {
		rel = f.Version.String()
	}
	return f.Kubelet.Fingerprint() + "/" + rel
}

// same reports whether two facts describe the same kubelet the same way.
func same(a, b *Facts) bool {
	if a == nil || b == nil {
		return a == b
	}
	return a.Fingerprint() == b.Fingerprint() && a.Start == b.Start && a.StateDir == b.StateDir &&
		a.ConfigChanged == b.ConfigChanged && slices.Equal(a.Limits, b.Limits)
}

// Options configure a Watcher.
type Options struct {
	// ProcRoot is where the kubelet process is looked for (/proc, or
	// /host/proc in a pod).
	ProcRoot string
	// Args are kubelet arguments given by the operator (--kubelet-config
	// becomes ["--config", path]); nil: discover the running kubelet.
	Args []string
	// RootDir overrides the kubelet's root dir (--kubelet-root-dir).
	RootDir string
	// Version states the kubelet's version (--kubelet-version).
	Version string
	// VersionCache is the file hotplugd preflight keeps the kubelet
	// binary's version in (its --version-cache): when it records the very
	// file the running kubelet was started from, the version is the
	// binary's own answer, read at the kubelet's start, without ptrace or
	// the API server. "": not read.
	VersionCache string
	// NodeVersion returns the Node's status.nodeInfo.kubeletVersion, the
	// last resort for the version; nil: not asked.
	NodeVersion func(ctx context.Context) (string, error)
	// Poll is how often the kubelet process is checked (default 5s).
	Poll time.Duration
	Log  *zap.Logger
	// Clock is for tests; nil: the real clock.
	Clock clock.WithTicker
}

// Watcher follows the kubelet. Create it with New, run it with Run.
type Watcher struct {
	o   Options
	log *zap.Logger

	refreshMu sync.Mutex // one discovery at a time

	mu      sync.Mutex
	current *Facts
	changed chan struct{}
	// version cache: the binary is run once per process.
	versionPID   int
	versionStart uint64
	version      kubeletversion.Version
	versionFrom  string
	versionErr   error

	// armed, for tests, is told after each discovery of Run whether Run
	// polls until the next.
	armed func(poll bool)
}

// New returns a Watcher; nothing is discovered before Refresh or Run.
func New(o Options) *Watcher {
	if o.Poll <= 0 {
		o.Poll = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Watcher{o: o, log: o.Log.Named("kubeletwatch"), changed: make(chan struct{})}
}

// Current returns the facts last discovered (nil before the first).
func (w *Watcher) Current() *Facts {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.current
}

// Changed returns a channel closed at the next change of the facts.
func (w *Watcher) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

// Refresh discovers the kubelet now, publishes the facts when they changed,
// and returns them. It never fails: a kubelet that cannot be discovered is
// facts with Err and Limits set.
func (w *Watcher) Refresh(ctx context.Context) *Facts {
	w.refreshMu.Lock()
	defer w.refreshMu.Unlock()
	f := w.discover(ctx)
	w.mu.Lock()
	changed := !same(w.current, f)
	if changed {
		w.current = f
		close(w.changed)
		w.changed = make(chan struct{})
	}
	w.mu.Unlock()
	if changed {
		w.logFacts(f)
	}
	return f
}

func (w *Watcher) logFacts(f *Facts) {
	switch {
	case f.Kubelet == nil:
		w.log.Warn("no kubelet: predicting capacity only, no remedy; looking again every poll", zap.Error(f.Err),
			zap.Duration("poll", w.o.Poll))
	default:
		fields := []zap.Field{zap.Int("pid", f.Kubelet.PID), zap.String("config", f.Kubelet.ConfigPath),
			zap.String("config_dir", f.Kubelet.ConfigDir), zap.String("root_dir", f.Kubelet.RootDir),
			zap.String("state_dir", f.StateDir), zap.String("healthz", f.Kubelet.HealthzURL),
			zap.String("version", f.Version.String()), zap.String("version_from", f.VersionFrom)}
		if len(f.Limits) > 0 {
			w.log.Warn("kubelet found, with limits", append(fields, zap.Strings("limits", f.Limits))...)
		} else {
			w.log.Info("kubelet found", fields...)
		}
	}
}

// discover builds the facts from scratch.
func (w *Watcher) discover(ctx context.Context) *Facts {
	f := &Facts{}
	var k *kubeletconfig.Kubelet
	var err error
	if w.o.Args != nil {
		k, err = kubeletconfig.FromArgs(w.o.Args, "/")
	} else {
		k, err = kubeletconfig.Discover(w.o.ProcRoot)
	}
	if err != nil {
		f.Err = err
		if errors.Is(err, kubeletconfig.ErrNotFound) {
			f.Limits = append(f.Limits, "no kubelet running yet: capacity only")
		} else {
			f.Limits = append(f.Limits, "the kubelet's configuration cannot be read: capacity only ("+err.Error()+")")
		}
		// The version may still come from the Node, for the log.
		return f
	}
	f.Kubelet = k
	if k.PID != 0 {
		if f.Start, err = kubeletconfig.ProcessStart(w.o.ProcRoot, k.PID); err != nil {
			w.log.Debug("kubelet start time", zap.Error(err))
		} else if boot, err := bootTime(w.o.ProcRoot); err == nil {
			f.Started = boot.Add(time.Duration(f.Start) * (time.Second / userHZ))
		}
	}
	if w.o.RootDir != "" {
		k.RootDir = w.o.RootDir
	}
	var v kubeletversion.Version
	v, f.VersionFrom, err = w.versionOf(ctx, k.PID, f.Start, k.Cmdline)
	w.release(f, v, err)
	if w.o.RootDir != "" {
		f.StateDir = w.o.RootDir
	} else if f.StateDir, err = k.StateDir(); err != nil {
		f.StateDir = ""
		f.Limits = append(f.Limits, "no remedy: "+err.Error())
	}
	if !f.Started.IsZero() {
		if newer, file := newerThan(k, f.Started); newer {
			f.ConfigChanged = true
			f.Limits = append(f.Limits, "the kubelet's configuration "+file+" changed after the kubelet started: allocatable is compared again after its next start")
		}
	}
	return f
}

// release sets f's version and release row from versionOf's result, and
// the limit when there is none.
func (w *Watcher) release(f *Facts, v kubeletversion.Version, err error) {
	f.Version = v
	if err != nil {
		f.Limits = append(f.Limits, "capacity only, no remedy: the kubelet's version is unknown ("+err.Error()+")")
		return
	}
	if f.Release, err = kubeletversion.Lookup(v); err != nil {
		f.Limits = append(f.Limits, fmt.Sprintf("capacity only, no remedy: kubelet %s is not a release hotplugd knows (it knows %s)", v, kubeletversion.Known()))
	}
}

// versionOf finds the kubelet's version: --kubelet-version, else the
// process's binary (once per process), else preflight's cache of the
// binary's answer, else the Node.
func (w *Watcher) versionOf(ctx context.Context, pid int, start uint64, cmdline []string) (kubeletversion.Version, string, error) {
	if w.o.Version != "" {
		v, err := kubeletversion.Parse(w.o.Version)
		return v, "--kubelet-version", err
	}
	var why []string
	if pid != 0 {
		w.mu.Lock()
		cached := w.versionPID == pid && w.versionStart == start
		v, from, err := w.version, w.versionFrom, w.versionErr
		w.mu.Unlock()
		if !cached {
			tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
			v, err = kubeletversion.FromProcess(tctx, w.o.ProcRoot, pid)
			cancel()
			from = "the kubelet's binary"
			w.mu.Lock()
			w.versionPID, w.versionStart, w.version, w.versionFrom, w.versionErr = pid, start, v, from, err
			w.mu.Unlock()
		}
		if err == nil {
			return v, from, nil
		}
		why = append(why, err.Error())
	}
	if pid != 0 && w.o.VersionCache != "" && len(cmdline) > 0 && filepath.IsAbs(cmdline[0]) {
		// The file as it is now, which the running kubelet runs unless it
		// changed since (the remedy withholds then: binaryChanged).
		v, ok, err := kubeletversion.FromCache(cmdline[0], w.o.VersionCache)
		switch {
		case ok:
			return v, "the kubelet's binary, as hotplugd preflight read it (" + w.o.VersionCache + ")", nil
		case err != nil:
			why = append(why, err.Error())
		}
	}
	if w.o.NodeVersion != nil {
		tctx, cancel := context.WithTimeout(ctx, 15*time.Second)
		s, err := w.o.NodeVersion(tctx)
		cancel()
		switch {
		case err != nil:
			why = append(why, err.Error())
		case s == "":
			why = append(why, "the Node reports no kubeletVersion")
		default:
			v, err := kubeletversion.Parse(s)
			if err == nil {
				return v, "the Node's status.nodeInfo.kubeletVersion", nil
			}
			why = append(why, err.Error())
		}
	}
	if len(why) == 0 {
		why = append(why, "no kubelet process and no Node to ask")
	}
	return kubeletversion.Version{}, "", errors.New(strings.Join(why, "; "))
}

// newerThan reports whether a configuration file was modified after the
// kubelet process started, and which.
func newerThan(k *kubeletconfig.Kubelet, started time.Time) (bool, string) {
	for _, p := range k.Files {
		fi, err := os.Stat(p)
		// A little slack: a file written just before the start.
		if err == nil && fi.ModTime().After(started.Add(startSlack)) {
			return true, p
		}
	}
	return false, ""
}

// startSlack covers the precision of a process start time (a clock tick,
// uptime's hundredths).
const startSlack = 50 * time.Millisecond

// userHZ is the unit of /proc/<pid>/stat's times (sysconf(_SC_CLK_TCK),
// 100 on every Linux architecture).
const userHZ = 100

// bootTime is when the machine booted, on the clock process start times
// count from: now minus <procRoot>/uptime (CLOCK_BOOTTIME, as
// /proc/<pid>/stat's starttime), to a hundredth of a second (btime in
// /proc/stat is whole seconds).
func bootTime(procRoot string) (time.Time, error) {
	now := time.Now()
	b, err := os.ReadFile(filepath.Join(procRoot, "uptime"))
	if err != nil {
		return time.Time{}, err
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return time.Time{}, fmt.Errorf("empty %s", filepath.Join(procRoot, "uptime"))
	}
	up, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s: %w", filepath.Join(procRoot, "uptime"), err)
	}
	return now.Add(-time.Duration(up * float64(time.Second))), nil
}

// Run discovers the kubelet, then follows it until ctx is done: the exit of
// the kubelet process it knows comes through a pidfd where it can have one,
// else a poll every Options.Poll checks that the process still runs (one
// stat file); with none known, the poll looks for one; inotify on the
// configuration files and directories reports their writes.
func (w *Watcher) Run(ctx context.Context) error {
	fw, err := fsnotify.NewWatcher()
	if err != nil {
		return fmt.Errorf("kubeletwatch: %w", err)
	}
	defer fw.Close()
	watched := map[string]bool{}
	files := map[string]bool{}
	// watch adds inotify watches for what f was read from; it reports
	// whether it added one.
	watch := func(f *Facts) bool {
		if f.Kubelet == nil {
			// Not readable now (a file being rewritten, no kubelet): keep
			// watching what was read last.
			return false
		}
		added := false
		clear(files)
		for _, p := range f.Kubelet.Files {
			files[filepath.Clean(p)] = true
			dir := filepath.Dir(p)
			if fi, err := os.Stat(p); err == nil && fi.IsDir() {
				dir = p
			}
			if !watched[dir] {
				if err := fw.Add(dir); err != nil {
					w.log.Debug("cannot watch", zap.String("dir", dir), zap.Error(err))
					continue
				}
				watched[dir], added = true, true
			}
		}
		return added
	}
	var f *Facts
	// Between changes nothing wakes the watcher up while it needs no
	// poll: the kubelet's exit comes through a pidfd (watchExit), and a
	// kubelet given by the operator (--kubelet-config) has only its files,
	// which inotify reports. It polls every Options.Poll while it looks for
	// a kubelet, asks for its version again, or cannot have a pidfd.
	var (
		ticker clock.Ticker
		tick   <-chan time.Time
		exit   *exitWatch
		exited <-chan struct{}
		// gone is the process whose exit came last: it is polled until
		// a discovery finds another.
		gone struct {
			pid   int
			start uint64
		}
	)
	arm := func() {
		if exit != nil && (f == nil || f.Kubelet == nil || f.Kubelet.PID != exit.pid || f.Start != exit.start) {
			exit.stop()
			exit, exited = nil, nil
		}
		poll := true
		switch {
		case f == nil || f.Kubelet == nil || versionUnknown(f):
		case f.Kubelet.PID == 0:
			poll = false
		case exit != nil:
			poll = false
		case f.Kubelet.PID == gone.pid && f.Start == gone.start:
		default:
			if exit = watchExit(w.o.ProcRoot, f); exit != nil {
				exited, poll = exit.exited, false
			}
		}
		switch {
		case poll && ticker == nil:
			ticker = w.o.Clock.NewTicker(w.o.Poll)
			tick = ticker.C()
		case !poll && ticker != nil:
			ticker.Stop()
			ticker, tick = nil, nil
		}
		if w.armed != nil {
			w.armed(poll)
		}
	}
	// Discover, watch what was read, and discover again while that added
	// a watch: a write before the watch is in the next read, a later one
	// comes through inotify. Then wait for the next change as the facts
	// allow (arm).
	refresh := func() {
		for range 4 {
			f = w.Refresh(ctx)
			if !watch(f) {
				break
			}
		}
		arm()
	}
	defer func() {
		exit.stop()
		if ticker != nil {
			ticker.Stop()
		}
	}()
	refresh()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-exited:
			// Polled from now on, as if it had been all along: the next
			// poll finds it gone and discovers again. Not at once: its
			// supervisor is restarting it, most likely, and a discovery
			// between the two processes would publish "no kubelet".
			w.log.Debug("the kubelet process exited; polling for the next", zap.Int("pid", exit.pid))
			gone.pid, gone.start = exit.pid, exit.start
			exit.stop()
			exit, exited = nil, nil
			arm()
		case <-tick:
			if !w.stillRunning(f) || versionUnknown(f) {
				refresh()
			}
		case ev, ok := <-fw.Events:
			if !ok {
				return nil
			}
			if files[filepath.Clean(ev.Name)] || files[filepath.Dir(ev.Name)] {
				w.log.Debug("kubelet configuration written", zap.String("file", ev.Name), zap.Stringer("op", ev.Op))
				refresh()
			}
		case err, ok := <-fw.Errors:
			if !ok {
				return nil
			}
			w.log.Warn("watching the kubelet's configuration failed; the poll still finds a new kubelet", zap.Error(err))
		}
	}
}

// versionUnknown reports whether a kubelet is known but its version could
// not be found (the Node could not be read, the binary cannot be run): the
// poll asks again, so that a passing API error is not a remedy lost for as
// long as that kubelet runs. A version found but not known to hotplugd is
// not asked again.
func versionUnknown(f *Facts) bool {
	return f != nil && f.Kubelet != nil && f.Version == (kubeletversion.Version{})
}

// stillRunning reports whether the kubelet process of f is still the one
// running; without a process (no kubelet, or --kubelet-config) it is false
// when there is no kubelet, so the poll looks again.
func (w *Watcher) stillRunning(f *Facts) bool {
	switch {
	case f == nil || f.Kubelet == nil:
		return false
	case f.Kubelet.PID == 0:
		return true // given by the operator: the files are watched
	}
	start, err := kubeletconfig.ProcessStart(w.o.ProcRoot, f.Kubelet.PID)
	return err == nil && start == f.Start
}
