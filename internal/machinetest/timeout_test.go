package machinetest

import (
	"flag"
	"testing"
	"time"
)

func TestBeforeTimeout(t *testing.T) {
	d, _ := flag.Lookup("test.timeout").Value.(flag.Getter).Get().(time.Duration)
	if d <= time.Second {
		t.Skipf("SKIPPED: go test's -timeout is %v: nothing to run before", d)
	}
	fired := make(chan struct{})
	defer BeforeTimeout(d-50*time.Millisecond, func() { close(fired) })()
	select {
	case <-fired:
	case <-time.After(5 * time.Second):
		t.Fatal("f did not run margin before the timeout (50 ms from now)")
	}
	// Off: a margin the timeout does not exceed, and a stopped one.
	BeforeTimeout(d, func() { t.Error("ran with a margin of the whole timeout") })()
	stop := BeforeTimeout(d-100*time.Millisecond, func() { t.Error("ran after stop") })
	stop()
	time.Sleep(200 * time.Millisecond)
}
