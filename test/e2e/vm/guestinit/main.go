//go:build linux

// Command guestinit is the /init of the guest that test/e2e/vm boots: a
// static program (CGO_ENABLED=0) in the initramfs next to /hotplugd.
//
// It mounts proc, sysfs and devtmpfs, runs
//
//	/hotplugd run --standalone --log-format json --metrics-addr "" ARGS...
//
// where ARGS are init's own arguments (what follows "--" on the kernel
// command line), and copies every line hotplugd writes to the serial console
// prefixed with "HOTPLUGD ", so the test can tell it from kernel messages.
// The guest has no shell: init reads commands from the console, one a line,
// "ID VERB ARG...", and answers each with one line "INIT {JSON}":
//
//	ID cat PATH          {"id":ID,"out":"<the file's content>"}
//	ID write PATH VALUE  {"id":ID} once VALUE was written (cpuN/online)
//	ID poweroff          stops hotplugd (SIGTERM), answers, powers off
//
// and {"id":ID,"err":"..."} on failure. It also reports
// {"event":"started","args":[...]} and, should hotplugd exit on its own,
// {"event":"exited","err":"..."} followed by a power-off, so that the test
// sees QEMU end instead of waiting. Console echo is turned off so that
// commands do not come back as output.
package main

import (
	"bufio"
	"encoding/json"
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

	"golang.org/x/sys/unix"
)

const (
	logPrefix   = "HOTPLUGD "
	replyPrefix = "INIT "
)

// console writes whole lines to the serial console, one write each, so
// that lines of hotplugd and of init do not mix.
type console struct {
	mu sync.Mutex
	w  io.Writer
}

func (c *console) line(prefix, s string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	io.WriteString(c.w, prefix+s+"\n")
}

func (c *console) reply(v map[string]any) {
	b, err := json.Marshal(v)
	if err != nil {
		b = []byte(strconv.Quote(err.Error()))
	}
	c.line(replyPrefix, string(b))
}

func main() {
	con := &console{w: os.Stdout}
	for _, m := range []struct{ source, target, fstype string }{
		{"proc", "/proc", "proc"},
		{"sysfs", "/sys", "sysfs"},
		{"devtmpfs", "/dev", "devtmpfs"},
	} {
		if err := unix.Mount(m.source, m.target, m.fstype, 0, ""); err != nil && !errors.Is(err, unix.EBUSY) {
			con.reply(map[string]any{"event": "mount", "err": fmt.Sprintf("mount %s: %v", m.target, err)})
			powerOff()
		}
	}
	noEcho(0)

	args := append([]string{"run", "--standalone", "--log-format", "json", "--metrics-addr", ""}, os.Args[1:]...)
	cmd := exec.Command("/hotplugd", args...)
	out, err := cmd.StderrPipe()
	if err != nil {
		con.reply(map[string]any{"event": "exited", "err": err.Error()})
		powerOff()
	}
	cmd.Stdout = cmd.Stderr
	if err := cmd.Start(); err != nil {
		con.reply(map[string]any{"event": "exited", "err": err.Error()})
		powerOff()
	}
	con.reply(map[string]any{"event": "started", "args": args})
	copied := make(chan struct{})
	go func() {
		defer close(copied)
		sc := bufio.NewScanner(out)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			con.line(logPrefix, sc.Text())
		}
	}()
	exited := make(chan error, 1)
	stopping := make(chan struct{})
	go func() {
		<-copied // all of its output, before Wait closes the pipe
		err := cmd.Wait()
		exited <- err
		select {
		case <-stopping:
		default:
			msg := "exited with status 0"
			if err != nil {
				msg = err.Error()
			}
			con.reply(map[string]any{"event": "exited", "err": msg})
			powerOff()
		}
	}()

	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		if len(f) < 2 {
			continue
		}
		id, err := strconv.Atoi(f[0])
		if err != nil {
			continue // noise on the line, not a command
		}
		switch verb, rest := f[1], f[2:]; {
		case verb == "cat" && len(rest) == 1:
			b, err := os.ReadFile(rest[0])
			con.reply(result(id, map[string]any{"out": string(b)}, err))
		case verb == "write" && len(rest) == 2:
			err := os.WriteFile(rest[0], []byte(rest[1]), 0)
			con.reply(result(id, nil, err))
		case verb == "poweroff" && len(rest) == 0:
			close(stopping)
			cmd.Process.Signal(syscall.SIGTERM)
			var err error
			select {
			case err = <-exited:
			case <-time.After(10 * time.Second):
				err = errors.New("hotplugd did not stop within 10s of SIGTERM")
			}
			con.reply(result(id, nil, err))
			powerOff()
		default:
			con.reply(result(id, nil, fmt.Errorf("unknown command %q", sc.Text())))
		}
	}
	// The console never ends; if it does, there is nothing left to do.
	powerOff()
}

func result(id int, v map[string]any, err error) map[string]any {
	if v == nil {
		v = map[string]any{}
	}
	v["id"] = id
	if err != nil {
		v["err"] = err.Error()
	}
	return v
}

// noEcho turns off the terminal's echo of what the test types.
func noEcho(fd int) {
	t, err := unix.IoctlGetTermios(fd, unix.TCGETS)
	if err != nil {
		return
	}
	t.Lflag &^= unix.ECHO | unix.ECHONL
	unix.IoctlSetTermios(fd, unix.TCSETS, t)
}

// powerOff ends the VM (QEMU exits). Should it fail, init exits: the kernel
// panics, and panic=-1 with QEMU's -no-reboot ends the VM too.
func powerOff() {
	unix.Sync()
	unix.Reboot(unix.LINUX_REBOOT_CMD_POWER_OFF)
	os.Exit(1)
}
