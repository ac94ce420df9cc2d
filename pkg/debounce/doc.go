// Package debounce turns the daemon's triggers (kernel uevents, hugepage
// file writes, overflows, the periodic resync, SIGHUP, start) into
// reconciles: a burst becomes one reconcile after a quiet window, and a burst
// that never goes quiet still gets one no later than a maximum delay after
// its first trigger.
//
// The rules live in Window, a plain state machine over explicit times that
// tests drive without a clock; Debouncer runs it on a clock (a fake one in
// tests) and calls the reconcile from a single goroutine, so reconciles never
// overlap (Fire, for a reconcile that is not debounced, waits its turn). A
// batch is pending from its first trigger until its reconcile has returned,
// with no gap between the two, and Idle wakes whoever waits for the end of
// the work. It touches nothing on the host.
package debounce
