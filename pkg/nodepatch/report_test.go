package nodepatch

import (
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func reportInputs() ReportInputs {
	pred := Prediction{Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("1")}}
	n := &v1.Node{Status: v1.NodeStatus{Capacity: v1.ResourceList{v1.ResourceCPU: resource.MustParse("2")}}}
	return ReportInputs{Node: n, Prediction: pred, Now: time.Date(2026, 11, 26, 4, 0, 0, 0, time.UTC), EventedKnown: true}
}

// TestReported: one CapacityDrift Event per drift; a drift an earlier
// hotplugd already reported (the condition on the Node) is not sent again;
// holds.
func TestReported(t *testing.T) {
	in := reportInputs()
	r := Reported(in)
	if len(r.Events) != 1 || r.Events[0].Reason != ReasonCapacityDrift || r.Patch == nil || r.Held != "" {
		t.Fatalf("first report %+v", r)
	}
	in.Evented = r.Evented
	if r2 := Reported(in); len(r2.Events) != 0 {
		t.Errorf("the same drift sent again: %+v", r2.Events)
	}

	// A restarted hotplugd: the Node's condition carries the drift.
	in = reportInputs()
	in.EventedKnown = false
	in.Node.Status.Conditions = []v1.NodeCondition{r.Condition}
	if r3 := Reported(in); len(r3.Events) != 0 {
		t.Errorf("a drift already on the Node sent again after a restart: %+v", r3.Events)
	}

	in = reportInputs()
	in.HoldAll = "under way"
	if r := Reported(in); r.Patch != nil || len(r.Events) != 0 || r.Held != "under way" || !r.Drift.Stale() {
		t.Errorf("held report %+v", r)
	}
	in = reportInputs()
	in.HoldStale = "just started"
	if r := Reported(in); r.Patch != nil || len(r.Events) != 0 {
		t.Errorf("a stale drift written within the grace: %+v", r)
	}
	in.Node.Status.Capacity[v1.ResourceCPU] = resource.MustParse("1")
	if r := Reported(in); r.Patch == nil || r.Held != "" || !strings.Contains(string(r.Patch), ReasonCapacityCurrent) {
		t.Errorf("a current Node within the grace is written at once: %+v", r)
	}
}

// TestNewest: the patch's answer when the watch lags, nil once the watch
// saw the Node deleted.
func TestNewest(t *testing.T) {
	node := func(rv string) *v1.Node { n := &v1.Node{}; n.ResourceVersion = rv; return n }
	w, p := node("5"), node("7")
	for _, tt := range []struct {
		name             string
		watched, patched *v1.Node
		synced           bool
		want             *v1.Node
	}{
		{"watch newer", node("9"), p, true, nil},
		{"patch newer", w, p, true, p},
		{"no patch", w, nil, true, w},
		{"deleted since the patch", nil, p, true, nil},
		{"not listed yet", nil, p, false, p},
	} {
		got := Newest(tt.watched, tt.synced, tt.patched)
		want := tt.want
		if tt.name == "watch newer" {
			want = tt.watched
		}
		if got != want {
			t.Errorf("%s: got %v, want %v", tt.name, got, want)
		}
	}
}
