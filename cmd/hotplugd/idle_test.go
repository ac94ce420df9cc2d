package main

import (
	"runtime"
	"runtime/debug"
	"testing"
)

// TestIdleRuntime: the daemon's GC target and processor count, unless the
// environment sets them.
func TestIdleRuntime(t *testing.T) {
	gc, procs := debug.SetGCPercent(100), runtime.GOMAXPROCS(0)
	t.Cleanup(func() { debug.SetGCPercent(gc); runtime.GOMAXPROCS(procs) })
	for _, tc := range []struct {
		name      string
		env       map[string]string
		gc, procs int
	}{
		{"defaults", nil, idleGCPercent, idleMaxProcs},
		{"GOGC and GOMAXPROCS set", map[string]string{"GOGC": "100", "GOMAXPROCS": "3"}, 100, 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			debug.SetGCPercent(100)
			runtime.GOMAXPROCS(3)
			idleRuntime(func(k string) string { return tc.env[k] })
			if got := debug.SetGCPercent(100); got != tc.gc {
				t.Errorf("GC percent %d, want %d", got, tc.gc)
			}
			if got := runtime.GOMAXPROCS(0); got != tc.procs {
				t.Errorf("GOMAXPROCS %d, want %d", got, tc.procs)
			}
		})
	}
}
