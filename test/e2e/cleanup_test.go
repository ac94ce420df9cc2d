//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/signal"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/internal/machinetest"
)

// cleanupStack holds what must be undone when the run ends, also when it
// is cut short by a signal or the timeout, where tests' cleanups do not
// run. Each step runs once.
type cleanupStack struct {
	running sync.Mutex // one run at a time: a second waits for the first
	mu      sync.Mutex
	steps   []*cleanupStep
}

type cleanupStep struct {
	name string
	once sync.Once
	fn   func()
}

// emergency is the run's cleanup stack.
var emergency = &cleanupStack{}

// push adds a step and returns a function that runs it (once; a second
// caller waits for the first to finish) and drops it from the stack, for
// a test's t.Cleanup.
func (c *cleanupStack) push(name string, fn func()) func() {
	st := &cleanupStep{name: name, fn: fn}
	c.mu.Lock()
	c.steps = append(c.steps, st)
	c.mu.Unlock()
	return func() {
		st.once.Do(st.fn)
		c.drop(st)
	}
}

// pushAbortOnly adds a step that only a cut-short run runs: when t ends it
// is dropped, not run.
func (c *cleanupStack) pushAbortOnly(t testing.TB, name string, fn func()) {
	st := &cleanupStep{name: name, fn: fn}
	c.mu.Lock()
	c.steps = append(c.steps, st)
	c.mu.Unlock()
	t.Cleanup(func() { c.drop(st) })
}

func (c *cleanupStack) drop(st *cleanupStep) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for i, x := range c.steps {
		if x == st {
			c.steps = append(c.steps[:i], c.steps[i+1:]...)
			return
		}
	}
}

// run runs every remaining step, the last pushed first.
func (c *cleanupStack) run() {
	c.running.Lock()
	defer c.running.Unlock()
	for {
		c.mu.Lock()
		if len(c.steps) == 0 {
			c.mu.Unlock()
			return
		}
		st := c.steps[len(c.steps)-1]
		c.steps = c.steps[:len(c.steps)-1]
		c.mu.Unlock()
		st.once.Do(st.fn)
	}
}

// aborting is set once the run is being cut short.
var aborting atomic.Bool

// abort cuts the run short: no kubelet starts any more (not even one
// hotplugd asks for), every step of the stack runs, the machine is put
// back as it was once more (a test goroutine may still have been changing
// it), and the process exits with code.
func abort(why string, code int) {
	aborting.Store(true)
	fmt.Fprintf(os.Stderr, "e2e: %s: stopping what was started and restoring the machine\n", why)
	if env != nil && env.noStart != "" {
		os.WriteFile(env.noStart, nil, 0o600)
	}
	emergency.run()
	restoreMachine()
	for _, l := range machine.leftovers {
		fmt.Fprintln(os.Stderr, "e2e:", l)
	}
	os.Exit(code)
}

// handleSignals aborts on SIGINT or SIGTERM: the kubelet runs in a session
// of its own and would outlive the test.
func handleSignals() (stop func()) {
	ch := make(chan os.Signal, 1)
	signal.Notify(ch, syscall.SIGINT, syscall.SIGTERM)
	done := make(chan struct{})
	go func() {
		select {
		case sig := <-ch:
			abort(sig.String(), 2)
		case <-done:
		}
	}()
	return func() {
		signal.Stop(ch)
		close(done)
	}
}

// timeoutWatchdog aborts 20 s before go test's -timeout would panic, which
// runs no cleanup.
func timeoutWatchdog() (stop func()) {
	return machinetest.BeforeTimeout(20*time.Second, func() {
		abort("the run is about to reach go test's -timeout", 1)
	})
}
