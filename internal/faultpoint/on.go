//go:build faultinject

package faultpoint

import (
	"fmt"
	"os"
	"sync/atomic"
	"time"
)

// Hit pauses at point when $HOTPLUGD_FAULTPOINT names it (once per
// process).
func Hit(point string) {
	if os.Getenv("HOTPLUGD_FAULTPOINT") != point || !hit.CompareAndSwap(false, true) {
		return
	}
	if f := os.Getenv("HOTPLUGD_FAULTPOINT_FILE"); f != "" {
		if err := os.WriteFile(f, []byte(point+"\n"), 0o644); err != nil {
			fmt.Fprintln(os.Stderr, "faultpoint:", err)
		}
	}
	hold, err := time.ParseDuration(os.Getenv("HOTPLUGD_FAULTPOINT_HOLD"))
	if err != nil {
		// Until killed. Not select{}: in a process with no other
		// goroutine (hotplugd preflight) built without cgo, the runtime
		// calls that a deadlock and exits.
		for {
			time.Sleep(time.Hour)
		}
	}
	time.Sleep(hold)
}

var hit atomic.Bool
