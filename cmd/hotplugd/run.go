package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/spf13/pflag"
	"go.uber.org/zap"

	"github.com/hotplugd/hotplugd/pkg/daemon"
	"github.com/hotplugd/hotplugd/pkg/debounce"
	"github.com/hotplugd/hotplugd/pkg/logging"
	"github.com/hotplugd/hotplugd/pkg/sdnotify"
)

// runOptions are the flags of `hotplugd run`.
type runOptions struct {
	Standalone  bool
	SysfsRoot   string
	ProcfsRoot  string
	QuietWindow time.Duration
	MaxDelay    time.Duration
	Resync      time.Duration
	MetricsAddr string
	Logging     logging.Options
}

// AddFlags registers the options on fs.
func (o *runOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&o.Standalone, "standalone", false, "run without a cluster: watch the machine and log every change (required until acting on the Node is available)")
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/sys", "sysfs mount to read the topology from (e.g. /host/sys in a container)")
	fs.StringVar(&o.ProcfsRoot, "procfs-root", "/proc", "procfs mount to read meminfo and hugepage counts from (e.g. /host/proc)")
	fs.DurationVar(&o.QuietWindow, "quiet-window", 500*time.Millisecond, "reconcile once no event has arrived for this long (a burst of events becomes one reconcile)")
	fs.DurationVar(&o.MaxDelay, "max-delay", 5*time.Second, "reconcile no later than this after the first event of a burst that never goes quiet")
	fs.DurationVar(&o.Resync, "resync", time.Minute, "period of the safety-net full re-read, for changes no event reports (0 disables)")
	fs.StringVar(&o.MetricsAddr, "metrics-addr", "127.0.0.1:9792", "address for /metrics and /healthz (\"\" disables)")
	o.Logging.AddFlags(fs)
}

// Validate checks the option values.
func (o *runOptions) Validate() error {
	var errs []error
	if !o.Standalone {
		errs = append(errs, errors.New("--standalone is required: acting on the Node and the kubelet is not available yet"))
	}
	if o.SysfsRoot == "" || o.ProcfsRoot == "" {
		errs = append(errs, errors.New("--sysfs-root and --procfs-root must not be empty"))
	}
	if o.QuietWindow <= 0 {
		errs = append(errs, fmt.Errorf("--quiet-window must be positive, not %v", o.QuietWindow))
	}
	if o.MaxDelay < o.QuietWindow {
		errs = append(errs, fmt.Errorf("--max-delay (%v) must be at least --quiet-window (%v)", o.MaxDelay, o.QuietWindow))
	}
	if o.Resync < 0 {
		errs = append(errs, fmt.Errorf("--resync must be 0 (off) or positive, not %v", o.Resync))
	}
	if err := o.Logging.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

func runRun(args []string, stdout, stderr io.Writer) int {
	var o runOptions
	fs := pflag.NewFlagSet("run", pflag.ContinueOnError)
	fs.SetOutput(stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: hotplugd run --standalone [flags]\n\nRuns the daemon: listens to kernel uevents for CPUs, memory and NUMA nodes and\nto writes of every hugepage count file, debounces bursts, re-reads the topology\nand logs every change (to journald under systemd). SIGHUP forces a re-read;\nSIGINT/SIGTERM stop it.\n\nFlags:\n%s", fs.FlagUsages())
	}
	o.AddFlags(fs)
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			return 0
		}
		fmt.Fprintf(stderr, "hotplugd run: %v (see hotplugd run --help)\n", err)
		return 2
	}
	if fs.NArg() > 0 {
		fmt.Fprintf(stderr, "hotplugd run: unexpected arguments %q\n", fs.Args())
		return 2
	}
	if err := o.Validate(); err != nil {
		fmt.Fprintf(stderr, "hotplugd run: %v\n", err)
		return 2
	}
	log, err := logging.New(o.Logging, stderr)
	if err != nil {
		fmt.Fprintf(stderr, "hotplugd run: %v\n", err)
		return 1
	}
	defer log.Sync()
	log = log.With(zap.String("version", version))

	d, err := daemon.New(daemon.Config{
		SysfsRoot: o.SysfsRoot, ProcfsRoot: o.ProcfsRoot,
		QuietWindow: o.QuietWindow, MaxDelay: o.MaxDelay, Resync: o.Resync,
		MetricsAddr: o.MetricsAddr,
		Log:         log,
		Notifier:    sdnotify.New(log.Named("sdnotify")),
	})
	if err != nil {
		log.Error("cannot start", zap.Error(err))
		return 1
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	hup := make(chan os.Signal, 1)
	signal.Notify(hup, syscall.SIGHUP)
	defer signal.Stop(hup)
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-hup:
				log.Info("SIGHUP: re-reading the topology")
				d.Trigger(debounce.TriggerSignal)
			}
		}
	}()

	log.Info("hotplugd started", zap.Bool("standalone", o.Standalone), zap.Duration("quiet_window", o.QuietWindow),
		zap.Duration("max_delay", o.MaxDelay), zap.Duration("resync", o.Resync))
	if err := d.Run(ctx); err != nil {
		log.Error("stopped", zap.Error(err))
		return 1
	}
	log.Info("hotplugd stopped")
	return 0
}
