package machinetest

import (
	"flag"
	"time"
)

// BeforeTimeout runs f margin before go test's -timeout ends the run: that
// end is a panic that runs no t.Cleanup and no deferred call, so what a
// test started outside itself (a VM, a server, a kubelet, temporary
// directories) is stopped and removed here instead. Call it from TestMain
// after flag.Parse. Nothing happens when -timeout is off or not above
// margin. stop cancels it.
func BeforeTimeout(margin time.Duration, f func()) (stop func()) {
	fl := flag.Lookup("test.timeout")
	if fl == nil {
		return func() {}
	}
	d, _ := fl.Value.(flag.Getter).Get().(time.Duration)
	if d <= margin {
		return func() {}
	}
	t := time.AfterFunc(d-margin, f)
	return func() { t.Stop() }
}
