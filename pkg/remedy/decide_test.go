package remedy

import (
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

var cpuDrift = nodepatch.Drift{{Field: nodepatch.FieldCapacity, Resource: v1.ResourceCPU,
	Reported: resource.MustParse("2"), Predicted: resource.MustParse("1")}}

func TestDecide(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	base := Inputs{Mode: ModeRestartKubelet, Known: true, Drift: cpuDrift, Now: t0.Add(10 * time.Second),
		LastActivity: t0, Settle: 3 * time.Second, Interval: 10 * time.Minute, Remediable: true, Key: "k1"}
	noise := nodepatch.Drift{{Field: nodepatch.FieldCapacity, Resource: v1.ResourceMemory,
		Reported: resource.MustParse("1Gi"), Predicted: resource.MustParse("1000Mi"), Noise: true}}
	tests := []struct {
		name   string
		change func(*Inputs)
		action Action
		at     time.Time
	}{
		{"settled drift: restart", func(*Inputs) {}, ActionRestart, time.Time{}},
		{"unknown node", func(in *Inputs) { in.Known = false }, ActionNone, time.Time{}},
		{"no drift", func(in *Inputs) { in.Drift = nil }, ActionNone, time.Time{}},
		{"only noise", func(in *Inputs) { in.Drift = noise }, ActionNone, time.Time{}},
		{"report mode", func(in *Inputs) { in.Mode = ModeReport }, ActionReport, time.Time{}},
		{"remedy off on the node", func(in *Inputs) { in.Off = "the label says so" }, ActionReport, time.Time{}},
		{"in-place resize kubelet", func(in *Inputs) { in.InPlaceResize = true }, ActionReport, time.Time{}},
		{"burst arriving", func(in *Inputs) { in.Busy = true }, ActionWait, time.Time{}},
		// A complete change restarts once its burst is quiet; one the
		// kernel says is still arriving waits for the settle time.
		{"complete, just quiet", func(in *Inputs) { in.Now = t0.Add(time.Millisecond) }, ActionRestart, time.Time{}},
		{"still arriving", func(in *Inputs) { in.Now, in.Arriving = t0.Add(time.Second), "a CPU device was added" }, ActionWait, t0.Add(3 * time.Second)},
		{"still arriving, settled exactly", func(in *Inputs) { in.Now, in.Arriving = t0.Add(3*time.Second), "a CPU device was added" }, ActionRestart, time.Time{}},
		// Rate limited: first a check whether a restart could help at
		// all (one per key), then the wait.
		{"rate limited", func(in *Inputs) { in.LastAttempt = t0.Add(-time.Minute) }, ActionCheck, t0.Add(9 * time.Minute)},
		{"rate limited, checked", func(in *Inputs) { in.LastAttempt, in.Checked = t0.Add(-time.Minute), "k1" }, ActionWait, t0.Add(9 * time.Minute)},
		{"rate limited, another key checked", func(in *Inputs) { in.LastAttempt, in.Checked = t0.Add(-time.Minute), "k0" }, ActionCheck, t0.Add(9 * time.Minute)},
		{"rate limit over", func(in *Inputs) { in.LastAttempt = t0.Add(-10 * time.Minute) }, ActionRestart, time.Time{}},
		// The daily budget: the oldest restart in the window frees it.
		{"budget spent", func(in *Inputs) {
			in.MaxPerDay, in.Restarts = 2, []time.Time{t0.Add(-3 * time.Hour), t0.Add(-5 * time.Hour)}
		}, ActionCheck, t0.Add(19 * time.Hour)},
		{"budget spent, checked", func(in *Inputs) {
			in.MaxPerDay, in.Restarts, in.Checked = 2, []time.Time{t0.Add(-3 * time.Hour), t0.Add(-5 * time.Hour)}, "k1"
		}, ActionWait, t0.Add(19 * time.Hour)},
		{"budget left", func(in *Inputs) { in.MaxPerDay, in.Restarts = 2, []time.Time{t0.Add(-3 * time.Hour)} }, ActionRestart, time.Time{}},
		{"no budget", func(in *Inputs) {
			in.Restarts = []time.Time{t0.Add(-3 * time.Hour), t0.Add(-5 * time.Hour)}
		}, ActionRestart, time.Time{}},
		{"memory down with no uevent (a balloon)", func(in *Inputs) { in.UnexplainedDecrease = true }, ActionReport, time.Time{}},
		{"this key was withheld before", func(in *Inputs) {
			in.Previous = &journal.Entry{Key: "k1", Start: t0.Add(-time.Hour), Outcome: OutcomeWithheld}
		}, ActionReport, time.Time{}},
		{"a kubelet that has just started", func(in *Inputs) { in.KubeletFresh = t0.Add(20 * time.Second) }, ActionWait, t0.Add(20 * time.Second)},
		// The cluster-wide restart budget: a try found it taken for this
		// key; the restart waits until the next try, then is tried again.
		{"budget taken", func(in *Inputs) {
			in.Budget = BudgetWait{Key: "k1", Until: t0.Add(15 * time.Second), Why: "held by node-b"}
		}, ActionWait, t0.Add(15 * time.Second)},
		{"budget taken, next try due", func(in *Inputs) { in.Budget = BudgetWait{Key: "k1", Until: t0.Add(10 * time.Second)} }, ActionRestart, time.Time{}},
		{"budget taken for another key", func(in *Inputs) { in.Budget = BudgetWait{Key: "k0", Until: t0.Add(time.Hour)} }, ActionRestart, time.Time{}},
		{"budget taken, still arriving", func(in *Inputs) {
			in.Budget, in.Now = BudgetWait{Key: "k1", Until: t0.Add(15 * time.Second)}, t0.Add(time.Second)
			in.Arriving = "2 hot-added memory blocks are not online yet"
		}, ActionWait, t0.Add(3 * time.Second)},
		// Windows (22 November 2026 is a Sunday).
		{"in a window", func(in *Inputs) { in.Windows = mustWindows(t, "sun 04:00-05:00") }, ActionRestart, time.Time{}},
		{"outside the windows: checked once", func(in *Inputs) { in.Windows = mustWindows(t, "mon-fri 02:00-05:00") }, ActionCheck, t0.Add(22 * time.Hour)},
		{"outside the windows, checked", func(in *Inputs) { in.Windows, in.Checked = mustWindows(t, "mon-fri 02:00-05:00"), "k1" }, ActionWait, t0.Add(22 * time.Hour)},
		{"outside the windows, waiting for the budget too", func(in *Inputs) {
			in.Windows, in.Checked = mustWindows(t, "sat 02:00-03:00"), "k1"
			in.Budget = BudgetWait{Key: "k1", Until: t0.Add(15 * time.Second)}
		}, ActionWait, t0.Add(6*24*time.Hour - 2*time.Hour)},
		{"a kubelet that has had its time", func(in *Inputs) { in.KubeletFresh = t0.Add(5 * time.Second) }, ActionRestart, time.Time{}},
		{"kubelet not remediable", func(in *Inputs) { in.Remediable, in.NotRemediable = false, "no kubelet running yet" }, ActionReport, time.Time{}},
		{"this key failed before", func(in *Inputs) {
			in.Previous = &journal.Entry{Key: "k1", Start: t0.Add(-time.Hour), Outcome: OutcomeFailed}
		}, ActionReport, time.Time{}},
		{"this key was refused before", func(in *Inputs) {
			in.Previous = &journal.Entry{Key: "k1", Start: t0.Add(-time.Hour), Outcome: OutcomeRefused}
		}, ActionReport, time.Time{}},
		{"this key needed a person before", func(in *Inputs) {
			in.Previous = &journal.Entry{Key: "k1", Start: t0.Add(-time.Hour), Outcome: OutcomeNeedsPerson}
		}, ActionReport, time.Time{}},
		// The machine went back and forth: a key that was remediated before
		// may be remediated again.
		{"this key was remediated before", func(in *Inputs) {
			in.Previous = &journal.Entry{Key: "k1", Start: t0.Add(-time.Hour), Outcome: OutcomeRemediated}
		}, ActionRestart, time.Time{}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			in := base
			tt.change(&in)
			p := Decide(in)
			if p.Action != tt.action || !p.At.Equal(tt.at) {
				t.Errorf("Decide = %v, want %s at %v", p, tt.action, tt.at)
			}
			if p.Why == "" {
				t.Error("a plan without a reason")
			}
		})
	}
}

func mustWindows(t *testing.T, specs ...string) Windows {
	t.Helper()
	var ws Windows
	for _, s := range specs {
		w, err := ParseWindow(s)
		if err != nil {
			t.Fatal(err)
		}
		ws = append(ws, w)
	}
	return ws
}
