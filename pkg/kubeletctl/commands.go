package kubeletctl

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"
)

// MaxOutput is how much of the command's combined output Command keeps (the
// end of it) for the log.
const MaxOutput int64 = 64 << 10

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
	// (e.g. `setsid kubelet ... >>/var/log/kubelet.log 2>&1 &`): the
	// command's output goes to a memory file that a process left holding
	// it would keep growing.
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
	return &Command{restart: o.Restart, log: log, shell: "/bin/sh"}, nil
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
// stdin from /dev/null and stdout and stderr into one anonymous memory file
// (memfd). When ctx ends first it is not killed: a restart is never cut
// between its stop and its start; the caller only stops waiting.
//
// The output is a file, not a pipe: a pipe's reader is hotplugd, and a
// command that writes after hotplugd died (rc-service prints between its
// stop and its start) would die of SIGPIPE there. A memory file has no
// reader to lose; it lives as long as a holder has it open, and the tail is
// read back once the shell exited. A process the command leaves running
// with its output not redirected (which it should not) keeps writing into
// that file, never killed for it.
func (c *Command) run(ctx context.Context, verb, script string) error {
	log := c.log.With(zap.String("op", verb), zap.String("command", script))
	out, err := memFile("hotplugd-" + verb)
	if err != nil {
		return fmt.Errorf("kubeletctl: %s command %q: %w", verb, script, err)
	}
	// Not CommandContext: nothing kills the restart once it has begun.
	cmd := exec.Command(c.shell, "-c", script)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	log.Info("running the " + verb + " command")
	began := time.Now()
	if err := cmd.Start(); err != nil {
		out.Close()
		return fmt.Errorf("kubeletctl: %s command %q: %w", verb, script, err)
	}
	exited := make(chan error, 1)
	go func() {
		exited <- cmd.Wait()
	}()
	var waitErr error
	select {
	case waitErr = <-exited:
	case <-ctx.Done():
		log.Warn("stopped waiting for the "+verb+" command: it goes on, detached", zap.Int("pid", cmd.Process.Pid))
		// The command keeps its own copy of the file; ours goes once it
		// has exited.
		go func() { <-exited; out.Close() }()
		return fmt.Errorf("kubeletctl: %s command %q: %w (the command goes on, detached, pid %d)", verb, script, ctx.Err(), cmd.Process.Pid)
	}
	output, truncated := readTail(out, MaxOutput)
	out.Close()
	fields := []zap.Field{zap.Duration("took", time.Since(began)), zap.String("output", output), zap.Bool("output_truncated", truncated)}
	if waitErr != nil {
		log.Warn("the "+verb+" command failed", append(fields, zap.Error(waitErr))...)
		return fmt.Errorf("kubeletctl: %s command %q: %w%s", verb, script, waitErr, outputTail(output))
	}
	log.Info("the "+verb+" command succeeded", fields...)
	return nil
}

// memFile is an anonymous file in memory (memfd_create), closed on exec in
// hotplugd (exec gives the child its own descriptors 1 and 2).
func memFile(name string) (*os.File, error) {
	fd, err := unix.MemfdCreate(name, unix.MFD_CLOEXEC)
	if err != nil {
		return nil, fmt.Errorf("memfd_create: %w", err)
	}
	return os.NewFile(uintptr(fd), "memfd:"+name), nil
}

// readTail reads the last max bytes of f (from its start: the file offset
// is shared with the writers), and whether earlier bytes were left out.
func readTail(f *os.File, max int64) (string, bool) {
	fi, err := f.Stat()
	if err != nil {
		return "", false
	}
	size, off := fi.Size(), int64(0)
	if size > max {
		off = size - max
	}
	b := make([]byte, size-off)
	n, _ := f.ReadAt(b, off)
	return string(b[:n]), off > 0
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
