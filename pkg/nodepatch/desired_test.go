package nodepatch

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/strategicpatch"
)

// apply applies the patches as the API server does.
func apply(t *testing.T, node *v1.Node, patches ...[]byte) *v1.Node {
	t.Helper()
	cur, err := json.Marshal(node)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range patches {
		if p == nil {
			continue
		}
		if cur, err = strategicpatch.StrategicMergePatch(cur, p, v1.Node{}); err != nil {
			t.Fatalf("patch %s: %v", p, err)
		}
	}
	out := &v1.Node{}
	if err := json.Unmarshal(cur, out); err != nil {
		t.Fatal(err)
	}
	return out
}

func TestDesiredLifecycle(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	minDelta := resource.MustParse("100Mi")
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{"other": "kept"}},
		Status: v1.NodeStatus{
			Capacity:   list("cpu", "2", "memory", "1Gi"),
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"}},
		},
	}
	pred := Prediction{Capacity: list("cpu", "1", "memory", "1Gi")}

	// 1. Drift appears: condition True, annotations set.
	// step applies the patch and returns which parts it had.
	step := func(now time.Time, note Note) (meta, status bool) {
		d := desiredFor(node, pred, Compare(pred, node.Status, minDelta), note, now, 0)
		p := patch(node, d)
		node = apply(t, node, p)
		var parts map[string]json.RawMessage
		json.Unmarshal(p, &parts)
		return parts["metadata"] != nil, parts["status"] != nil
	}
	if meta, status := step(t0, Note{}); !meta || !status {
		t.Fatalf("first sync wrote metadata %v, status %v; want both", meta, status)
	}
	c := FindCondition(node)
	want := v1.NodeCondition{Type: ConditionType, Status: v1.ConditionTrue, Reason: ReasonCapacityDrift,
		Message:            "the kubelet reports what the machine had when it started (reported -> this machine): capacity cpu 2 -> 1",
		LastHeartbeatTime:  metav1.NewTime(t0),
		LastTransitionTime: metav1.NewTime(t0)}
	if diff := cmp.Diff(want, *c); diff != "" {
		t.Errorf("condition (-want +got):\n%s", diff)
	}
	wantAnn := map[string]string{"other": "kept", AnnotationCapacity: "cpu=1,memory=1Gi", AnnotationLastChange: "2026-11-22T04:00:00Z"}
	if diff := cmp.Diff(wantAnn, node.Annotations); diff != "" {
		t.Errorf("annotations (-want +got):\n%s", diff)
	}
	if len(node.Status.Conditions) != 2 {
		t.Errorf("Ready condition lost: %+v", node.Status.Conditions)
	}

	// 2. Nothing changed: nothing to write (a daemon restart writes nothing).
	if d := desiredFor(node, pred, Compare(pred, node.Status, minDelta), Note{}, t0.Add(time.Minute), 0); patch(node, d) != nil {
		t.Errorf("unchanged node: patch %s", patch(node, d))
	}

	// 3. A note: reason and message change, transition time kept.
	if meta, status := step(t0.Add(2*time.Minute), Note{Reason: ReasonRemediationFailed, Message: "boom"}); meta || !status {
		t.Fatal("note not written")
	}
	c = FindCondition(node)
	if c.Reason != ReasonRemediationFailed || c.Message != want.Message+"; boom" || !c.LastTransitionTime.Equal(&want.LastTransitionTime) {
		t.Errorf("with note: %+v", c)
	}

	// 4. The kubelet restarted and reports the machine: False, new
	// transition time, last-change kept (the detected capacity did not change).
	node.Status.Capacity = list("cpu", "1", "memory", "1Gi")
	t3 := t0.Add(3 * time.Minute)
	if meta, _ := step(t3, Note{}); meta {
		t.Error("annotations rewritten")
	}
	c = FindCondition(node)
	if c.Status != v1.ConditionFalse || c.Reason != ReasonCapacityCurrent || !c.LastTransitionTime.Time.Equal(t3) {
		t.Errorf("after restart: %+v", c)
	}
	if node.Annotations[AnnotationLastChange] != "2026-11-22T04:00:00Z" {
		t.Errorf("last-change = %q", node.Annotations[AnnotationLastChange])
	}

	// 5. The machine changes again: last-change moves; allocatable appears.
	pred = Prediction{Capacity: list("cpu", "2", "memory", "1Gi"), Allocatable: list("cpu", "2", "memory", "900Mi")}
	t4 := t0.Add(4 * time.Minute)
	step(t4, Note{})
	if got := node.Annotations[AnnotationLastChange]; got != t4.Format(time.RFC3339) {
		t.Errorf("last-change = %q, want %s", got, t4.Format(time.RFC3339))
	}
	if got := node.Annotations[AnnotationAllocatable]; got != "cpu=2,memory=900Mi" {
		t.Errorf("allocatable annotation = %q", got)
	}
	// 6. Allocatable unknown again: its annotation is removed.
	pred.Allocatable = nil
	step(t4, Note{})
	if _, ok := node.Annotations[AnnotationAllocatable]; ok {
		t.Errorf("allocatable annotation kept: %v", node.Annotations)
	}

	// 7. A kubelet hotplugd does not know: the condition says why the
	// prediction is capacity only, drift or not.
	pred.Limit = "capacity only: kubelet v1.38.0-alpha.0 is a pre-release"
	step(t4, Note{})
	if c := FindCondition(node); c.Status != v1.ConditionTrue || !strings.HasSuffix(c.Message, "capacity cpu 1 -> 2; "+pred.Limit) {
		t.Errorf("drift with a limit: %+v", c)
	}
	node.Status.Capacity = list("cpu", "2", "memory", "1Gi")
	step(t4, Note{})
	if c := FindCondition(node); c.Status != v1.ConditionFalse || c.Message != currentMessage+"; "+pred.Limit {
		t.Errorf("current with a limit: %+v", c)
	}
}

func TestFormatResources(t *testing.T) {
	got := FormatResources(list("memory", "1Gi", "hugepages-1Gi", "0", "cpu", "2", "hugepages-2Mi", "2Mi"))
	if want := "cpu=2,memory=1Gi,hugepages-1Gi=0,hugepages-2Mi=2Mi"; got != want {
		t.Errorf("FormatResources = %q, want %q", got, want)
	}
}

// TestHeartbeat: with a heartbeat, a Node that carries what hotplugd wants
// gets its condition's lastHeartbeatTime written again once the heartbeat
// has passed, and only then: an hour of a current Node, woken at every
// NextHeartbeat, is 12 patches at 5 minutes, each of the condition alone
// (no annotation, the status and transition time kept). Without one, none.
func TestHeartbeat(t *testing.T) {
	t0 := time.Date(2026, 11, 22, 4, 0, 0, 0, time.UTC)
	pred := Prediction{Capacity: list("cpu", "2", "memory", "1Gi")}
	for _, tc := range []struct {
		heartbeat time.Duration
		want      int
	}{{5 * time.Minute, 12}, {time.Minute, 60}, {0, 0}} {
		node := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n"}, Status: v1.NodeStatus{Capacity: list("cpu", "2", "memory", "1Gi")}}
		in := ReportInputs{Node: node, Prediction: pred, MinMemoryDelta: resource.MustParse("100Mi"), Now: t0, Heartbeat: tc.heartbeat}
		r := Reported(in)
		node = apply(t, node, r.Patch) // the first write
		first := *FindCondition(node)
		patches := 0
		now := t0
		for {
			// Woken at the next heartbeat, or checked every minute without.
			next := r.NextHeartbeat
			if next.IsZero() {
				next = now.Add(time.Minute)
			}
			if !next.After(now) {
				t.Fatalf("heartbeat %v: next heartbeat %v is not after now %v (the loop would spin)", tc.heartbeat, next, now)
			}
			if now = next; now.After(t0.Add(time.Hour)) {
				break
			}
			in.Node, in.Now = node, now
			r = Reported(in)
			if r.Patch == nil {
				continue
			}
			patches++
			if patches == 1 {
				t.Logf("heartbeat %v: a heartbeat patch is %d bytes: %s", tc.heartbeat, len(r.Patch), r.Patch)
			}
			var parts map[string]json.RawMessage
			json.Unmarshal(r.Patch, &parts)
			if parts["metadata"] != nil {
				t.Errorf("heartbeat %v: a heartbeat patch rewrote annotations: %s", tc.heartbeat, r.Patch)
			}
			node = apply(t, node, r.Patch)
			c := FindCondition(node)
			if !c.LastHeartbeatTime.Time.Equal(now) || !c.LastTransitionTime.Equal(&first.LastTransitionTime) || !sameCondition(*c, first) {
				t.Errorf("heartbeat %v at %v: condition %+v, want the first (%+v) with only its heartbeat at now", tc.heartbeat, now, c, first)
			}
		}
		if patches != tc.want {
			t.Errorf("heartbeat %v: %d patches in an hour of a current Node, want %d", tc.heartbeat, patches, tc.want)
		}
	}
}
