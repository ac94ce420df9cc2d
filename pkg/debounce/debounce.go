package debounce

import (
	"context"
	"sort"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// Trigger names what asked for a reconcile.
type Trigger string

// The daemon's triggers.
const (
	TriggerStart     Trigger = "start"
	TriggerUevent    Trigger = "uevent"
	TriggerHugePages Trigger = "hugepages"
	TriggerOverflow  Trigger = "overflow"
	TriggerResync    Trigger = "resync"
	TriggerSignal    Trigger = "sighup"
)

// Batch is the triggers one reconcile answers.
type Batch struct {
	// First and Last are when the first and the last trigger arrived.
	First, Last time.Time
	// Due is when the batch became due: Last plus the quiet window, or
	// First plus the maximum delay when that is earlier. A handler that
	// starts later than Due was held up by its timer or the scheduler.
	Due time.Time
	// Count is the number of triggers; Triggers counts them by kind.
	Count    int
	Triggers map[Trigger]int
	// Cause is the trigger that opened the batch.
	Cause Trigger
}

// Kinds returns the batch's trigger kinds, sorted.
func (b Batch) Kinds() []Trigger {
	kinds := make([]Trigger, 0, len(b.Triggers))
	for k := range b.Triggers {
		kinds = append(kinds, k)
	}
	sort.Slice(kinds, func(i, j int) bool { return kinds[i] < kinds[j] })
	return kinds
}

// Window is the debounce rule as a state machine: Add records a trigger and
// returns when the batch is due, Due hands the batch over once that time has
// come. The zero Window is unusable; set Quiet and MaxDelay.
type Window struct {
	// Quiet is how long no trigger must arrive before the batch is due.
	Quiet time.Duration
	// MaxDelay bounds the time from the first trigger to the batch being due.
	MaxDelay time.Duration

	pending Batch
}

// Add records a trigger that arrived at now and returns when the pending
// batch is due: min(last trigger + Quiet, first trigger + MaxDelay).
func (w *Window) Add(t Trigger, now time.Time) time.Time {
	if w.pending.Count == 0 {
		w.pending = Batch{First: now, Cause: t, Triggers: map[Trigger]int{}}
	}
	w.pending.Last = now
	w.pending.Count++
	w.pending.Triggers[t]++
	return w.Deadline()
}

// Pending reports whether triggers are waiting.
func (w *Window) Pending() bool { return w.pending.Count > 0 }

// Deadline is when the pending batch is due; zero when nothing is pending.
func (w *Window) Deadline() time.Time {
	if w.pending.Count == 0 {
		return time.Time{}
	}
	d := w.pending.Last.Add(w.Quiet)
	if limit := w.pending.First.Add(w.MaxDelay); limit.Before(d) {
		d = limit
	}
	return d
}

// Due returns the pending batch and clears it when its deadline has come at
// now.
func (w *Window) Due(now time.Time) (Batch, bool) {
	if w.pending.Count == 0 || now.Before(w.Deadline()) {
		return Batch{}, false
	}
	b := w.pending
	b.Due = w.Deadline()
	w.pending = Batch{}
	return b, true
}

// Debouncer runs a Window on a clock. Trigger may be called from any
// goroutine; Run calls fire from its own goroutine, one batch at a time.
// Triggers that arrive while fire runs open the next batch.
//
// A batch is pending from its first trigger until fire has returned for it
// (Pending, Idle): a consumer that must not act while the machine is being
// re-read never sees a moment where the batch is neither waiting nor being
// handled.
type Debouncer struct {
	clock clock.Clock
	wake  chan struct{}

	// fire is held while a handler runs: Run's and Fire's never overlap.
	fire sync.Mutex

	mu     sync.Mutex
	window Window
	firing int           // batches handed over whose handler has not returned
	idle   chan struct{} // closed while nothing is pending
}

// New returns a Debouncer with the given quiet window and maximum delay.
func New(clk clock.Clock, quiet, maxDelay time.Duration) *Debouncer {
	if maxDelay < quiet {
		maxDelay = quiet
	}
	idle := make(chan struct{})
	close(idle)
	return &Debouncer{
		clock:  clk,
		wake:   make(chan struct{}, 1),
		window: Window{Quiet: quiet, MaxDelay: maxDelay},
		idle:   idle,
	}
}

// Trigger records a trigger now. It never blocks. Only the first trigger
// of a batch wakes Run: a later one moves the deadline later, never
// earlier, and Run's timer re-reads the window when it fires. (Waking Run on
// every trigger also had it re-arm its timer from a clock reading that a
// fake clock could step past in between.)
func (d *Debouncer) Trigger(t Trigger) {
	d.mu.Lock()
	d.busyLocked()
	first := !d.window.Pending()
	d.window.Add(t, d.clock.Now())
	d.mu.Unlock()
	if !first {
		return
	}
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// Fire hands a batch of the one trigger t over to fire at once, from the
// caller's goroutine, without debouncing (the daemon's first snapshot). It
// is pending like any other batch while fire runs, and waits for a handler
// that Run is running to return first: handlers never overlap. Triggers
// waiting in the window are left for Run.
func (d *Debouncer) Fire(t Trigger, fire func(Batch)) {
	d.mu.Lock()
	now := d.clock.Now()
	d.busyLocked()
	d.firing++
	d.mu.Unlock()
	defer d.fired()
	d.fire.Lock()
	defer d.fire.Unlock()
	fire(Batch{First: now, Last: now, Due: now, Count: 1, Cause: t, Triggers: map[Trigger]int{t: 1}})
}

// Pending reports whether a batch is pending: from its first trigger (a
// burst still arriving or going quiet) until the handler it was handed to
// has returned.
func (d *Debouncer) Pending() bool {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.pendingLocked()
}

// Idle returns a channel that is closed once nothing is pending (see
// Pending): at once when nothing is pending now, else when the last
// pending batch's handler returns with no trigger waiting. A trigger after
// that opens a new channel; take Idle again after every wake-up. Taking it
// before reading Pending loses no transition: if Pending then reads true,
// the channel is closed no earlier than the moment it turns false.
func (d *Debouncer) Idle() <-chan struct{} {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.idle
}

func (d *Debouncer) pendingLocked() bool { return d.window.Pending() || d.firing > 0 }

// busyLocked opens a new idle channel when nothing was pending: the caller
// is about to make something pending.
func (d *Debouncer) busyLocked() {
	if !d.pendingLocked() {
		d.idle = make(chan struct{})
	}
}

// fired records that a handler returned, and closes the idle channel when
// that left nothing pending.
func (d *Debouncer) fired() {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.firing--
	if !d.pendingLocked() {
		close(d.idle)
	}
}

// Run fires batches until ctx is done, then returns nil. A batch pending at
// cancellation is dropped, and stays pending: the daemon is stopping.
func (d *Debouncer) Run(ctx context.Context, fire func(Batch)) error {
	var timer clock.Timer
	var timerC <-chan time.Time
	stop := func() {
		if timer != nil {
			timer.Stop()
			timer, timerC = nil, nil
		}
	}
	defer stop()
	for {
		// What a pending wake announced is read below: drop it, so it
		// does not have this loop re-arm a timer a moment later from a
		// clock reading a fake clock can be stepped past.
		select {
		case <-d.wake:
		default:
		}
		d.mu.Lock()
		now := d.clock.Now()
		b, due := d.window.Due(now)
		deadline := d.window.Deadline()
		if due {
			// Counted before the window lets go of it: the batch is
			// pending without a gap until fire returned.
			d.firing++
		}
		d.mu.Unlock()
		if due {
			stop()
			d.handle(fire, b)
			continue
		}
		stop()
		if !deadline.IsZero() {
			timer = d.clock.NewTimer(deadline.Sub(now))
			timerC = timer.C()
		}
		select {
		case <-ctx.Done():
			return nil
		case <-d.wake:
		case <-timerC:
			timer, timerC = nil, nil
		}
	}
}

// handle runs fire for a batch counted in firing.
func (d *Debouncer) handle(fire func(Batch), b Batch) {
	defer d.fired()
	d.fire.Lock()
	defer d.fire.Unlock()
	fire(b)
}
