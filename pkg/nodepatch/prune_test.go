package nodepatch

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// TestPrunePatch: what hotplugd wrote (a drift's condition and
// annotations, and an annotation of another hotplugd version) goes, the
// rest of the Node stays; a pruned Node needs no second patch.
func TestPrunePatch(t *testing.T) {
	t0 := time.Date(2026, 11, 27, 3, 0, 0, 0, time.UTC)
	node := &v1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "n", Annotations: map[string]string{"other": "kept", AnnotationPrefix + "from-a-later-version": "x"}},
		Status: v1.NodeStatus{
			Capacity:   list("cpu", "2", "memory", "1Gi"),
			Conditions: []v1.NodeCondition{{Type: v1.NodeReady, Status: v1.ConditionTrue, Reason: "KubeletReady"}},
		},
	}
	pred := Prediction{Capacity: list("cpu", "1", "memory", "1Gi"), Allocatable: list("cpu", "1", "memory", "900Mi")}
	r := Reported(ReportInputs{Node: node, Prediction: pred, MinMemoryDelta: resource.MustParse("100Mi"), Now: t0})
	node = apply(t, node, r.Patch)
	o := OwnedBy(node)
	wantAnn := []string{AnnotationAllocatable, AnnotationCapacity, AnnotationPrefix + "from-a-later-version", AnnotationLastChange}
	if o.Condition == nil || o.Condition.Status != v1.ConditionTrue || !cmp.Equal(o.Annotations, wantAnn) {
		t.Fatalf("before: %+v, want the drift's condition and annotations %q", o, wantAnn)
	}
	before := node.DeepCopy()
	pruned := apply(t, node, PrunePatch(node))
	if o := OwnedBy(pruned); !o.Empty() {
		t.Errorf("after the prune the Node still carries %+v", o)
	}
	want := before.DeepCopy()
	want.Annotations = map[string]string{"other": "kept"}
	want.Status.Conditions = before.Status.Conditions[:0]
	for _, c := range before.Status.Conditions {
		if c.Type != ConditionType {
			want.Status.Conditions = append(want.Status.Conditions, c)
		}
	}
	if diff := cmp.Diff(want, pruned); diff != "" {
		t.Errorf("pruned Node (-want +got):\n%s", diff)
	}
	if p := PrunePatch(pruned); p != nil {
		t.Errorf("a pruned Node gets another patch: %s", p)
	}
}
