package debounce

import (
	"context"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	clocktesting "k8s.io/utils/clock/testing"
)

var t0 = time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC)

func at(ms int) time.Time { return t0.Add(time.Duration(ms) * time.Millisecond) }

func TestWindow(t *testing.T) {
	type step struct {
		add   Trigger // "" means: check Due at ms
		ms    int
		due   bool // for checks: a batch is handed over
		count int  // for checks: its Count
		first int  // for checks: its First in ms
		dl    int  // for adds: the deadline returned, in ms
	}
	tests := []struct {
		name  string
		steps []step
	}{
		{
			name: "single trigger fires after the quiet window",
			steps: []step{
				{add: TriggerUevent, ms: 0, dl: 500},
				{ms: 499},
				{ms: 500, due: true, count: 1, first: 0},
				{ms: 2000},
			},
		},
		{
			name: "a burst is one batch, due a quiet window after its last trigger",
			steps: []step{
				{add: TriggerUevent, ms: 0, dl: 500},
				{add: TriggerUevent, ms: 100, dl: 600},
				{add: TriggerUevent, ms: 400, dl: 900},
				{ms: 899},
				{ms: 900, due: true, count: 3, first: 0},
			},
		},
		{
			name: "a burst that never goes quiet is cut at the maximum delay",
			steps: func() []step {
				var s []step
				for ms := 0; ms < 5000; ms += 200 {
					dl := ms + 500
					if dl > 5000 {
						dl = 5000
					}
					s = append(s, step{add: TriggerUevent, ms: ms, dl: dl})
				}
				s = append(s, step{ms: 4999}, step{ms: 5000, due: true, count: 25, first: 0})
				// the rest of the burst opens the next batch
				s = append(s, step{add: TriggerUevent, ms: 5100, dl: 5600}, step{ms: 5600, due: true, count: 1, first: 5100})
				return s
			}(),
		},
		{
			name:  "nothing pending, nothing due",
			steps: []step{{ms: 0}, {ms: 100000}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			w := Window{Quiet: 500 * time.Millisecond, MaxDelay: 5 * time.Second}
			for i, s := range tt.steps {
				if s.add != "" {
					if got := w.Add(s.add, at(s.ms)); !got.Equal(at(s.dl)) {
						t.Fatalf("step %d: Add at %dms: deadline %v, want %dms", i, s.ms, got.Sub(t0), s.dl)
					}
					continue
				}
				b, due := w.Due(at(s.ms))
				if due != s.due {
					t.Fatalf("step %d: Due(%dms) = %v, want %v", i, s.ms, due, s.due)
				}
				if due && (b.Count != s.count || !b.First.Equal(at(s.first))) {
					t.Fatalf("step %d: batch count %d first %v, want %d %dms", i, b.Count, b.First.Sub(t0), s.count, s.first)
				}
				// Every case checks a batch at the moment it became due.
				if due && !b.Due.Equal(at(s.ms)) {
					t.Fatalf("step %d: batch due at %v, want %dms", i, b.Due.Sub(t0), s.ms)
				}
			}
		})
	}
}

func TestWindowBatchContents(t *testing.T) {
	w := Window{Quiet: time.Second, MaxDelay: 5 * time.Second}
	w.Add(TriggerStart, at(0))
	w.Add(TriggerUevent, at(10))
	w.Add(TriggerUevent, at(20))
	w.Add(TriggerHugePages, at(30))
	b, ok := w.Due(at(1030))
	if !ok {
		t.Fatal("not due")
	}
	want := Batch{First: at(0), Last: at(30), Due: at(1030), Count: 4, Cause: TriggerStart,
		Triggers: map[Trigger]int{TriggerStart: 1, TriggerUevent: 2, TriggerHugePages: 1}}
	if diff := cmp.Diff(want, b); diff != "" {
		t.Errorf("batch (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]Trigger{TriggerHugePages, TriggerStart, TriggerUevent}, b.Kinds()); diff != "" {
		t.Errorf("Kinds() (-want +got):\n%s", diff)
	}
	if w.Pending() {
		t.Error("still pending after Due")
	}
}

// TestDebouncerFakeClock drives Run with a fake clock: no sleeps, the clock
// only moves when the test steps it.
func TestDebouncerFakeClock(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	d := New(clk, 500*time.Millisecond, 5*time.Second)
	fired := make(chan Batch, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- d.Run(ctx, func(b Batch) { fired <- b }) }()

	// waitTimer waits until Run has armed its timer for the pending batch.
	waitTimer := func() {
		t.Helper()
		for i := 0; !clk.HasWaiters(); i++ {
			if i > 1e6 {
				t.Fatal("Run never armed a timer")
			}
			time.Sleep(time.Microsecond) // yields to Run; the fake clock does not move
		}
	}
	expectNone := func() {
		t.Helper()
		select {
		case b := <-fired:
			t.Fatalf("unexpected batch %+v", b)
		default:
		}
	}

	for i := 0; i < 1000; i++ { // a burst of 1000 triggers at one instant
		d.Trigger(TriggerUevent)
	}
	waitTimer()
	clk.Step(499 * time.Millisecond)
	expectNone()
	clk.Step(time.Millisecond)
	b := <-fired
	if b.Count != 1000 || b.Cause != TriggerUevent {
		t.Errorf("batch = %+v, want 1000 uevents", b)
	}
	expectNone()

	// A steady trickle every 400ms never goes quiet: the max delay cuts it.
	for elapsed := 0; elapsed < 5000; elapsed += 400 {
		d.Trigger(TriggerHugePages)
		waitTimer()
		clk.Step(400 * time.Millisecond)
		if elapsed+400 < 5000 {
			expectNone()
		}
	}
	b = <-fired
	if b.Count != 13 || b.Last.Sub(b.First) != 4800*time.Millisecond {
		t.Errorf("trickle batch = count %d span %v, want 13 over 4.8s", b.Count, b.Last.Sub(b.First))
	}

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run() = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
}

// runDebouncer runs d with a handler that reports each batch on entered and
// returns only when the test sends on release. It stops with the test.
func runDebouncer(t *testing.T, d *Debouncer) (entered chan Batch, release chan struct{}) {
	t.Helper()
	entered, release = make(chan Batch), make(chan struct{})
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		d.Run(ctx, func(b Batch) {
			entered <- b
			<-release
		})
	}()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return entered, release
}

// fireNext steps the fake clock through the quiet window once Run has armed
// its timer, and waits for the handler to be entered with the batch. Run
// may be re-arming its timer from a time it read before the step (a trigger
// woke it meanwhile): that timer is due a quiet window after the step, so
// the clock is stepped again until the handler is entered. Nothing else is
// pending, so the extra steps fire nothing else.
func fireNext(t *testing.T, clk *clocktesting.FakeClock, entered <-chan Batch) Batch {
	t.Helper()
	for i := 0; !clk.HasWaiters(); i++ {
		if i > 1e6 {
			t.Fatal("Run never armed a timer")
		}
		time.Sleep(time.Microsecond) // yields to Run; the fake clock does not move
	}
	deadline := time.Now().Add(5 * time.Second)
	for {
		clk.Step(500 * time.Millisecond)
		select {
		case b := <-entered:
			return b
		case <-time.After(10 * time.Millisecond):
			if time.Now().After(deadline) {
				t.Fatal("the handler was not called")
			}
		}
	}
}

// TestPendingUntilHandlerReturns: a batch is pending from its first trigger
// until its handler has returned, not only until Run hands it over; the
// daemon's Busy, and through it the remedy, relies on there being no gap.
func TestPendingUntilHandlerReturns(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	d := New(clk, 500*time.Millisecond, 5*time.Second)
	entered, release := runDebouncer(t, d)

	if d.Pending() {
		t.Fatal("Pending() = true before any trigger")
	}
	d.Trigger(TriggerUevent)
	if !d.Pending() {
		t.Fatal("Pending() = false after a trigger")
	}
	fireNext(t, clk, entered)
	if !d.Pending() {
		t.Error("Pending() = false while the handler for its batch runs")
	}
	// A trigger while the handler runs opens the next batch: still pending
	// once the first handler returned.
	d.Trigger(TriggerHugePages)
	release <- struct{}{}
	if !d.Pending() {
		t.Error("Pending() = false with the next batch waiting")
	}
	if b := fireNext(t, clk, entered); b.Cause != TriggerHugePages || b.Count != 1 {
		t.Errorf("second batch = %+v, want one hugepages trigger", b)
	}
	if !d.Pending() {
		t.Error("Pending() = false while the handler for the second batch runs")
	}
	release <- struct{}{}
	// Pending turns false once the handler returned, from Run's goroutine.
	for deadline := time.Now().Add(5 * time.Second); d.Pending(); time.Sleep(time.Microsecond) {
		if time.Now().After(deadline) {
			t.Fatal("Pending() still true after the last handler returned")
		}
	}
}

// closed reports whether c is closed, without waiting.
func closed(c <-chan struct{}) bool {
	select {
	case <-c:
		return true
	default:
		return false
	}
}

// waitClosed waits for c to be closed; the deadline only bounds a broken
// test.
func waitClosed(t *testing.T, c <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-c:
	case <-time.After(5 * time.Second):
		t.Fatalf("%s: the idle channel was not closed", what)
	}
}

func TestIdle(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	d := New(clk, 500*time.Millisecond, 5*time.Second)
	entered, release := runDebouncer(t, d)

	if !closed(d.Idle()) {
		t.Fatal("Idle() not closed before any trigger")
	}
	// Taken before the trigger: closed, and stays closed.
	before := d.Idle()
	d.Trigger(TriggerUevent)
	idle := d.Idle()
	if closed(idle) || !closed(before) {
		t.Fatal("after a trigger: want a new open idle channel, the old one still closed")
	}
	d.Trigger(TriggerUevent)
	if d.Idle() != idle {
		t.Error("a second trigger of the same batch replaced the idle channel")
	}
	fireNext(t, clk, entered)
	if closed(idle) {
		t.Error("idle closed while the handler runs")
	}
	release <- struct{}{}
	waitClosed(t, idle, "handler returned")
	if d.Pending() {
		t.Error("Pending() = true once idle was closed")
	}

	// A trigger while the handler runs: idle only after the next batch.
	d.Trigger(TriggerResync)
	idle = d.Idle()
	fireNext(t, clk, entered)
	d.Trigger(TriggerSignal)
	release <- struct{}{}
	if closed(idle) {
		t.Error("idle closed with the next batch waiting")
	}
	fireNext(t, clk, entered)
	release <- struct{}{}
	waitClosed(t, idle, "second batch handled")
}

// TestFire: a batch fired at once is pending while its handler runs, and
// never runs alongside a handler of Run.
func TestFire(t *testing.T) {
	clk := clocktesting.NewFakeClock(t0)
	d := New(clk, 500*time.Millisecond, 5*time.Second)

	var got Batch
	var pendingInside bool
	var idleInside <-chan struct{}
	d.Fire(TriggerStart, func(b Batch) { got, pendingInside, idleInside = b, d.Pending(), d.Idle() })
	want := Batch{First: t0, Last: t0, Due: t0, Count: 1, Cause: TriggerStart, Triggers: map[Trigger]int{TriggerStart: 1}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("fired batch (-want +got):\n%s", diff)
	}
	if !pendingInside {
		t.Error("Pending() = false inside Fire's handler")
	}
	if !closed(idleInside) || d.Pending() {
		t.Error("still pending after Fire returned")
	}

	// Fire while Run's handler runs waits for it. The race detector sees
	// an overlap on running.
	entered, release := runDebouncer(t, d)
	var running bool
	d.Trigger(TriggerUevent)
	fireNext(t, clk, entered)
	running = true
	fired := make(chan bool)
	go d.Fire(TriggerSignal, func(Batch) { fired <- running })
	running = false
	release <- struct{}{}
	select {
	case overlapped := <-fired:
		if overlapped {
			t.Error("Fire's handler ran while Run's handler was running")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Fire's handler never ran")
	}
	waitClosed(t, d.Idle(), "after Fire")
}
