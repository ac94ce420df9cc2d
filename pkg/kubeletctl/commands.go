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

// CommandOptions configures NewCommands.
type CommandOptions struct {
	// Stop and Start are shell commands (/bin/sh -c) that stop and start
	// the kubelet and exit once that is done, with status 0 on success.
	// A Start command that launches the kubelet itself must detach it
	// from its output (e.g. `setsid kubelet ... >>/var/log/kubelet.log
	// 2>&1 &`); a process left holding the output is not waited for.
	Stop, Start string
	// Log receives what is done and the commands' output; nil means no
	// logging.
	Log *zap.Logger
}

// Commands stops and starts the kubelet with shell commands, for hosts
// without systemd.
type Commands struct {
	stop, start string
	log         *zap.Logger

	// Seams for tests.
	shell string
	// drainGrace is how long the output is read after the shell exited
	// before a process that still holds it is given up on.
	drainGrace time.Duration
}

// NewCommands checks that both commands are given.
func NewCommands(o CommandOptions) (*Commands, error) {
	var missing []string
	if strings.TrimSpace(o.Stop) == "" {
		missing = append(missing, "stop")
	}
	if strings.TrimSpace(o.Start) == "" {
		missing = append(missing, "start")
	}
	if len(missing) > 0 {
		return nil, fmt.Errorf("kubeletctl: commands: the %s command is empty: both a stop and a start command are needed", strings.Join(missing, " and the "))
	}
	log := o.Log
	if log == nil {
		log = zap.NewNop()
	}
	return &Commands{
		stop:       o.Stop,
		start:      o.Start,
		log:        log,
		shell:      "/bin/sh",
		drainGrace: 2 * time.Second,
	}, nil
}

// String names the controller for logs and events.
func (c *Commands) String() string { return "commands" }

// Close does nothing and returns nil: Commands holds nothing between
// commands. It is there so that the caller can close either Controller.
func (c *Commands) Close() error { return nil }

// Stop runs the stop command and waits for it to exit.
func (c *Commands) Stop(ctx context.Context) error { return c.run(ctx, "stop", c.stop) }

// Start runs the start command and waits for it to exit.
func (c *Commands) Start(ctx context.Context) error { return c.run(ctx, "start", c.start) }

// run runs `sh -c script` in a process group of its own, with stdin from
// /dev/null and stdout and stderr into one pipe. When ctx ends first, the
// whole group is killed: the shell and anything it started and waits for.
//
// The pipe is ours rather than exec's: exec waits for every holder of its
// pipe to close it, which a kubelet started in the background never does,
// and closing it under that kubelet would kill it with SIGPIPE. Here the
// pipe is read until EOF for at most drainGrace after the shell exited, and
// after that by a goroutine that discards until the last holder is gone.
func (c *Commands) run(ctx context.Context, verb, script string) error {
	log := c.log.With(zap.String("op", verb), zap.String("command", script))
	r, w, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("kubeletctl: %s command %q: %w", verb, script, err)
	}
	cmd := exec.CommandContext(ctx, c.shell, "-c", script)
	cmd.Stdout, cmd.Stderr = w, w
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error {
		// The group's id is the shell's pid (Setpgid). Kill the group,
		// then the shell again in case the group is gone already.
		if err := syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL); err != nil && !errors.Is(err, syscall.ESRCH) {
			return err
		}
		return cmd.Process.Kill()
	}
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
	waitErr := cmd.Wait()
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
		if ctx.Err() != nil {
			return fmt.Errorf("kubeletctl: %s command %q: %w (killed its process group)%s", verb, script, ctx.Err(), outputTail(output))
		}
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
