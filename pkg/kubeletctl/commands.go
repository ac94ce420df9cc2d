package kubeletctl

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"go.uber.org/zap"
)

// MaxOutput is how much of a command's combined output Commands keeps (the
// end of it) for the log.
const MaxOutput = 64 << 10

// errorOutput is how much of the end of the output an error carries.
const errorOutput = 1 << 10

// CommandOptions configures NewCommand.
type CommandOptions struct {
	// Restart is a shell command (/bin/sh -c) that restarts the kubelet
	// through its supervisor and exits once that is done, with status 0 on
	// success: the supervisor's own restart (`rc-service kubelet restart`,
	// `supervisorctl restart kubelet`), whose start runs `hotplugd
	// preflight` before the kubelet as the systemd drop-in does. A command
	// that launches the kubelet itself must detach it from its output
	// (e.g. `setsid kubelet ... >>/var/log/kubelet.log 2>&1 &`); a process
	// left holding the output is not waited for.
	Restart string
	// Log receives what is done and the command's output; nil means no
	// logging.
	Log *zap.Logger
}

// Command restarts the kubelet with one shell command, for hosts without
// systemd. The command runs in a session of its own, detached from
// hotplugd: when hotplugd is killed, or its context ends, the command goes
// on to the end (hotplugd only stops waiting for it), so no stop is ever
// left without its start.
type Command struct {
	restart string
	log     *zap.Logger

	// Seams for tests.
	shell string
	// drainGrace is how long the output is read after the shell exited
	// before a process that still holds it is given up on.
	drainGrace time.Duration
}

// NewCommand checks that the command is given.
func NewCommand(o CommandOptions) (*Command, error) {
	if strings.TrimSpace(o.Restart) == "" {
		return nil, errors.New("kubeletctl: the restart command is empty")
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Command{restart: o.Restart, log: log, shell: "/bin/sh", drainGrace: 2 * time.Second}, nil
}

// String names the controller for logs and events.
func (c *Command) String() string { return "restart command" }

// Close does nothing and returns nil: Command holds nothing between
// restarts.
func (c *Command) Close() error { return nil }

// Restart runs the restart command and waits for it to exit, or for ctx
// to end (then the command goes on, detached).
func (c *Command) Restart(ctx context.Context) error { return c.run(ctx, "restart", c.restart) }

// run runs `sh -c script` in a session of its own (setsid: no controlling
// terminal, no signal sent to hotplugd's process group reaches it), with
// stdin from /dev/null and stdout and stderr into one pipe. When ctx ends
// first it is not killed: a restart is never cut between its stop and its
// start; the caller only stops waiting.
//
// The pipe is ours rather than exec's: exec waits for every holder of its
// pipe to close it, which a kubelet started in the background never does,
// and closing it under that kubelet would kill it with SIGPIPE. Here the
// reader drains the pipe until every writer closed it, or until drainGrace
// after the shell exited; the pipe is then left to the garbage collector
// (its read end is closed, a writer left gets EPIPE, which a kubelet
// started with its output redirected never sees).
func (c *Command) run(ctx context.Context, verb, script string) error {
	log := c.log.With(zap.String("op", verb), zap.String("command", script))
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("kubeletctl: %s command %q: %w", verb, script, err)
	}
	// Not CommandContext: nothing kills the restart once it has begun.
	cmd := exec.Command(c.shell, "-c", script)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	log.Info("running the " + verb + " command")
	began := time.Now()
	err = cmd.Start()
	w.Close() // the children hold their copies
	if err != nil {
		r.Close()
		return fmt.Errorf("kubeletctl: %s command %q: %w", verb, script, err)
	}
	out := &tail{max: MaxOutput}
	drained := make(chan struct{})
	go func() {
		defer close(drained)
		defer r.Close()
		_, _ = io.Copy(out, r)
	}()
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-ctx.Done():
		log.Warn("stopped waiting for the "+verb+" command: it goes on, detached", zap.Int("pid", cmd.Process.Pid))
		return fmt.Errorf("kubeletctl: %s command %q: %w (the command goes on, detached, pid %d)", verb, script, ctx.Err(), cmd.Process.Pid)
	}
	grace := time.NewTimer(c.drainGrace)
	select {
	case <-drained:
	case <-grace.C:
		log.Warn("a process the command started still holds its output: not waiting for it; its output is discarded")
	}
	grace.Stop()
	output, truncated := out.text()
	fields := []zap.Field{zap.Duration("took", time.Since(began)), zap.String("output", output), zap.Bool("output_truncated", truncated)}
	if waitErr != nil {
		log.Warn("the "+verb+" command failed", append(fields, zap.Error(waitErr))...)
		return fmt.Errorf("kubeletctl: %s command %q: %w%s", verb, script, waitErr, outputTail(output))
	}
	log.Info("the "+verb+" command succeeded", fields...)
	return nil
}

// outputTail is the end of output for an error, on one line.
func outputTail(output string) string {
	output = strings.TrimSpace(output)
	if output == "" {
		return ", no output"
	}
	if len(output) > errorOutput {
		output = "..." + output[len(output)-errorOutput:]
	}
	return ", output: " + strconv.Quote(output)
}

// tail keeps the last max bytes written to it. It is written by the
// goroutine reading the pipe while run may already read it.
type tail struct {
	mu        sync.Mutex
	max       int
	buf       []byte
	truncated bool
}

func (t *tail) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	n := len(p)
	if len(p) >= t.max {
		t.buf = append(t.buf[:0], p[len(p)-t.max:]...)
		t.truncated = true
		return n, nil
	}
	if over := len(t.buf) + len(p) - t.max; over > 0 {
		t.buf = append(t.buf[:0], t.buf[over:]...)
		t.truncated = true
	}
	t.buf = append(t.buf, p...)
	return n, nil
}

// text returns what is kept and whether earlier output was dropped.
func (t *tail) text() (string, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	return string(t.buf), t.truncated
}
