package main

import (
	"runtime"
	"runtime/debug"
)

// Defaults of the Go runtime for `hotplugd run`, a daemon idle almost all
// the time (issue 23: its idle RSS); GOGC and GOMAXPROCS in the
// environment override them.
const (
	// idleGCPercent lets the heap grow by a quarter of what is live
	// before a collection, not by all of it with at least 4 MiB (the
	// runtime's default, GOGC=100): the daemon's live heap is about
	// 1 MiB, so the default lets every resync's garbage pile up to 4 MiB,
	// which stay resident. With it, the RSS stays about 2 MiB lower once
	// resyncs and changes have run, for a collection every few minutes at
	// idle (a millisecond each).
	idleGCPercent = 25
	// idleMaxProcs is the processors the runtime schedules on: the
	// daemon needs no more, whatever the node's CPU count, and a fixed
	// count stops the runtime from resizing its processors (and their
	// caches, memory that stays) at each CPU hot-plug, which it tracks.
	// Not fewer on a node that boots with one CPU: CPUs are what get
	// hot-added.
	idleMaxProcs = 2
)

// idleRuntime sets the defaults above unless getenv has GOGC or
// GOMAXPROCS.
func idleRuntime(getenv func(string) string) {
	if getenv("GOGC") == "" {
		debug.SetGCPercent(idleGCPercent)
	}
	if getenv("GOMAXPROCS") == "" {
		runtime.GOMAXPROCS(idleMaxProcs)
	}
}
