package control

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/remedy"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// decideBase is a settled CPU upgrade (16 CPUs, the Node reports 8) on a
// static-policy kubelet 1.36 that started long ago, in restart mode.
func decideBase(t *testing.T) Inputs {
	t.Helper()
	root := t.TempDir()
	if err := fixturegen.OneNode(16, 8<<20, 0).WriteDir(root); err != nil {
		t.Fatal(err)
	}
	snap, err := topology.NewFS(filepath.Join(root, "sys"), filepath.Join(root, "proc")).CapacitySnapshot()
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\ncpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n"))
	if err != nil {
		t.Fatal(err)
	}
	t0 := time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC)
	facts := &kubeletwatch.Facts{
		Kubelet: &kubeletconfig.Kubelet{PID: 4242, Config: cfg, RootDir: "/var/lib/kubelet"},
		Start:   100, Started: t0.Add(-time.Hour),
		Version: kubeletversion.MustParse("v1.36.3"), Release: kubeletversion.ByMinor(36), StateDir: "/var/lib/kubelet",
	}
	pred, err := Predict(snap, facts)
	if err != nil {
		t.Fatal(err)
	}
	node := &v1.Node{}
	node.Name, node.ResourceVersion = "n", "7"
	node.Status = reportOld(pred)
	return Inputs{
		Config: Config{Mode: remedy.ModeRestartKubelet, Settle: 3 * time.Second, Interval: 10 * time.Minute, Grace: 20 * time.Second,
			MinMemoryDelta: resource.MustParse("100Mi")},
		Now: t0.Add(10 * time.Second), Snapshot: snap, Kubelet: facts, Node: node, LastActivity: t0,
		Done: Done{EventedKnown: true},
	}
}

// TestDecide: the table of the whole policy's parts, each row one input
// changed from a settled drift that a restart fixes.
func TestDecide(t *testing.T) {
	base := decideBase(t)
	t0 := base.LastActivity
	entry := journal.Entry{Seq: 1, Key: "other", Start: t0.Add(-time.Hour), Outcome: remedy.OutcomeRemediated,
		Reason: nodepatch.ReasonRemediated, Message: "restarted", Restarted: true}
	type want struct {
		action   remedy.Action
		held     string // part of Node.Held ("" none)
		patch    bool
		events   []string
		wake     time.Time
		remedyAt time.Time
	}
	drifted := []string{nodepatch.ReasonCapacityDrift}
	for _, tt := range []struct {
		name   string
		change func(*Inputs)
		want   want
	}{
		{"settled drift: patch, Event, restart", func(*Inputs) {}, want{action: remedy.ActionRestart, patch: true, events: drifted}},
		{"drift already sent as an Event", func(in *Inputs) {
			in.Done.Evented = "the kubelet reports what the machine had when it started (reported -> this machine): capacity cpu 8 -> 16, allocatable cpu 7 -> 15"
		}, want{action: remedy.ActionRestart, patch: true}},
		{"no snapshot yet", func(in *Inputs) { in.Snapshot = nil }, want{action: remedy.ActionNone}},
		{"no Node yet", func(in *Inputs) { in.Node = nil }, want{action: remedy.ActionNone}},
		{"Node current", func(in *Inputs) { in.Node.Status = reportMachine(mustPredict(t, *in)) }, want{action: remedy.ActionNone, patch: true}},
		{"report mode", func(in *Inputs) { in.Mode = remedy.ModeReport }, want{action: remedy.ActionReport, patch: true, events: drifted}},
		{"complete: no settle wait", func(in *Inputs) { in.Now = t0.Add(time.Millisecond) }, want{action: remedy.ActionRestart, patch: true, events: drifted}},
		{"still arriving: the settle time is the wake", func(in *Inputs) { in.Now, in.Arriving = t0.Add(time.Second), "a CPU device was added" },
			want{action: remedy.ActionWait, patch: true, events: drifted, wake: t0.Add(3 * time.Second), remedyAt: t0.Add(3 * time.Second)}},
		{"burst arriving", func(in *Inputs) { in.Busy = true }, want{action: remedy.ActionWait, patch: true, events: drifted}},
		{"a restart under way holds the writes and the remedy", func(in *Inputs) {
			in.Journal.Underway = &journal.Underway{Key: "k", Phase: journal.PhaseVerifying, Start: t0}
		}, want{action: remedy.ActionWait, held: "under way", remedyAt: time.Time{}}},
		{"the executor busy holds the remedy, not the writes", func(in *Inputs) { in.Done.Remedying = true },
			want{action: remedy.ActionWait, patch: true, events: drifted}},
		{"a kubelet that has just started: one grace for the writes and the remedy", func(in *Inputs) {
			in.Kubelet.Started = t0
		}, want{action: remedy.ActionWait, held: "just started", wake: t0.Add(20 * time.Second), remedyAt: t0.Add(20 * time.Second)}},
		{"a failed write waits for its retry", func(in *Inputs) { in.Done.RetryAt = t0.Add(time.Minute) },
			want{action: remedy.ActionRestart, held: "retrying", events: drifted, wake: t0.Add(time.Minute)}},
		{"journal entries become Events, in order", func(in *Inputs) {
			in.Journal.Attempts = []journal.Entry{entry, {Seq: 2, Key: "other", Start: t0.Add(-time.Hour), Outcome: remedy.OutcomeInterrupted}}
			in.Journal.Seq = 2
		}, want{action: remedy.ActionRestart, patch: true, events: []string{nodepatch.ReasonRemediated, nodepatch.ReasonCapacityDrift}}},
		{"the rate limit: check once", func(in *Inputs) {
			in.Journal.Attempts, in.Journal.Seq, in.Done.JournalSent = []journal.Entry{entry}, 1, 1
			in.Journal.Attempts[0].Start = t0.Add(-time.Minute)
		}, want{action: remedy.ActionCheck, patch: true, events: drifted, wake: t0.Add(9 * time.Minute), remedyAt: t0.Add(9 * time.Minute)}},
		{"a balloon: memory down with no uevent", func(in *Inputs) { in.Node.Status = reportMoreMemory(mustPredict(t, *in)) },
			want{action: remedy.ActionReport, patch: true, events: drifted}},
		{"a hot-remove: memory down after a memory offline uevent", func(in *Inputs) {
			in.Node.Status = reportMoreMemory(mustPredict(t, *in))
			in.LastMemoryDown = t0
		}, want{action: remedy.ActionRestart, patch: true, events: drifted}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			in := decideBase(t)
			tt.change(&in)
			p := Decide(in)
			var events []string
			for _, e := range p.Events {
				events = append(events, e.Reason)
			}
			got := want{action: p.Remedy.Action, patch: p.Node.Patch != nil, events: events, wake: p.Wake, remedyAt: p.Remedy.At}
			if tt.want.held != "" && strings.Contains(p.Node.Held, tt.want.held) {
				got.held = tt.want.held
			} else {
				got.held = p.Node.Held
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(want{})); diff != "" {
				t.Errorf("plan (-want +got):\n%s\n%s", diff, p)
			}
			if p.Prediction != nil && p.Remedy.Key != "" && p.Remedy.Key != p.Prediction.Key {
				t.Errorf("the remedy's key %s is not the prediction's %s", p.Remedy.Key, p.Prediction.Key)
			}
		})
	}
}

// TestDecideNote: the remedy's last word on this prediction's key is the
// condition's reason and note while the drift lasts.
func TestDecideNote(t *testing.T) {
	in := decideBase(t)
	key := mustPredict(t, in).Key
	in.Journal.Attempts = []journal.Entry{{Seq: 1, Key: key, Start: in.Now.Add(-time.Hour), Outcome: remedy.OutcomeWithheld,
		Reason: nodepatch.ReasonRestartWithheld, Message: "the kubelet was not restarted: because", Warning: true}}
	in.Journal.Seq, in.Done.JournalSent = 1, 1
	p := Decide(in)
	if c := p.Node.Condition; c.Reason != nodepatch.ReasonRestartWithheld || !strings.HasSuffix(c.Message, "; the kubelet was not restarted: because") {
		t.Errorf("condition %+v, want the withheld note", c)
	}
	if p.Remedy.Action != remedy.ActionReport {
		t.Errorf("remedy %s, want report (one attempt per key)", p.Remedy)
	}
}

// TestDecideBudgetNote: a node that found the restart budget taken says
// so in its condition while it waits, while its next try is due (a
// restart planned) and while that try runs (the executor busy, nothing
// under way), so that the wait writes the Node once; the wait's end is
// the wake. Not for another key, and not once the remedy is paused.
func TestDecideBudgetNote(t *testing.T) {
	const note = "waiting for the cluster's restart budget (at most 2 kubelet restarts at once)"
	base := decideBase(t)
	key := mustPredict(t, base).Key
	until := base.Now.Add(7 * time.Second)
	for _, tc := range []struct {
		name   string
		change func(*Inputs)
		noted  bool
		action remedy.Action
	}{
		{"waiting", func(*Inputs) {}, true, remedy.ActionWait},
		{"next try due", func(in *Inputs) { in.Now = until }, true, remedy.ActionRestart},
		{"the try running", func(in *Inputs) { in.Now, in.Done.Remedying = until, true }, true, remedy.ActionWait},
		{"a resync's reconcile (busy)", func(in *Inputs) { in.Now, in.Busy = until, true }, true, remedy.ActionWait},
		{"another key", func(in *Inputs) { in.Done.Budget.Key = "other" }, false, remedy.ActionRestart},
		{"paused", func(in *Inputs) { in.Paused = "maintenance" }, false, remedy.ActionReport},
	} {
		in := decideBase(t)
		in.Done.Budget = remedy.BudgetWait{Key: key, Until: until, Why: "waiting for the cluster's restart budget (2 at once), held by [a b]", Note: note}
		tc.change(&in)
		p := Decide(in)
		if got := strings.HasSuffix(p.Node.Condition.Message, "; "+note); got != tc.noted || p.Node.Condition.Reason != nodepatch.ReasonCapacityDrift {
			t.Errorf("%s: condition %s %q, noted %v, want %v", tc.name, p.Node.Condition.Reason, p.Node.Condition.Message, got, tc.noted)
		}
		if p.Remedy.Action != tc.action {
			t.Errorf("%s: remedy %s, want %s", tc.name, p.Remedy, tc.action)
		}
		if tc.name == "waiting" && (!p.Remedy.BudgetWait || !p.Wake.Equal(until) || len(p.Events) != 1) {
			t.Errorf("%s: remedy %s (budget wait %v), wake %v, events %v; want the budget's wait until %v and one drift Event", tc.name, p.Remedy, p.Remedy.BudgetWait, p.Wake, p.Events, until)
		}
	}
}

// TestDecideIsPure: the same inputs give the same plan.
func TestDecideIsPure(t *testing.T) {
	in := decideBase(t)
	a, b := Decide(in), Decide(in)
	if a.String() != b.String() {
		t.Errorf("two plans for one input:\n%s\n%s", a, b)
	}
}

func mustPredict(t *testing.T, in Inputs) nodepatch.Prediction {
	t.Helper()
	p, err := Predict(in.Snapshot, in.Kubelet)
	if err != nil {
		t.Fatal(err)
	}
	return p
}
