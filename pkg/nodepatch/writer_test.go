package nodepatch

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes/fake"
	k8stesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/record"

	"github.com/hotplugd/hotplugd/internal/kubeclienttest"
)

func writerRig(t *testing.T, dryRun bool) (*Writer, *fake.Clientset, *record.FakeRecorder) {
	t.Helper()
	n := &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: "n1"}}
	c := fake.NewClientset(n)
	rec := record.NewFakeRecorder(10)
	w, err := NewWriter(WriterOptions{Client: kubeclienttest.Clientset(c), NodeName: "n1", DryRun: dryRun, Recorder: rec})
	if err != nil {
		t.Fatal(err)
	}
	return w, c, rec
}

// TestWriterPatch: one nodes/status patch, as given, with hotplugd's field
// manager; the Node it answers is returned.
func TestWriterPatch(t *testing.T) {
	w, c, _ := writerRig(t, false)
	d := desired{
		condition:   v1.NodeCondition{Type: ConditionType, Status: v1.ConditionTrue, Reason: ReasonCapacityDrift, Message: "m"},
		annotations: map[string]string{AnnotationCapacity: "cpu=2"},
	}
	data := patch(&v1.Node{}, d)
	n, err := w.Patch(context.Background(), data, d.condition)
	if err != nil {
		t.Fatal(err)
	}
	if c := FindCondition(n); c == nil || c.Reason != ReasonCapacityDrift || n.Annotations[AnnotationCapacity] != "cpu=2" {
		t.Errorf("the answered Node %+v", n)
	}
	var patches []k8stesting.PatchAction
	for _, a := range c.Actions() {
		if p, ok := a.(k8stesting.PatchAction); ok {
			patches = append(patches, p)
		}
	}
	if len(patches) != 1 || patches[0].GetSubresource() != "status" || string(patches[0].GetPatch()) != string(data) {
		t.Fatalf("patches %+v, want one of status with %s", patches, data)
	}
}

// TestWriterDryRun: nothing is sent.
func TestWriterDryRun(t *testing.T) {
	w, c, rec := writerRig(t, true)
	n, err := w.Patch(context.Background(), []byte(`{}`), v1.NodeCondition{})
	if n != nil || err != nil {
		t.Errorf("dry-run patch = %v, %v", n, err)
	}
	w.Event(Event{Type: v1.EventTypeWarning, Reason: ReasonCapacityDrift, Message: "m"})
	if a := c.Actions(); len(a) != 0 {
		t.Errorf("requests in a dry run: %v", a)
	}
	if len(rec.Events) != 0 {
		t.Errorf("Events in a dry run: %d", len(rec.Events))
	}
}

// TestWriterEvent: an Event on the Node, by type, reason and message.
func TestWriterEvent(t *testing.T) {
	w, _, rec := writerRig(t, false)
	w.Event(Event{Type: v1.EventTypeWarning, Reason: ReasonRestartWithheld, Message: "why"})
	if got := <-rec.Events; got != "Warning RestartWithheld why" {
		t.Errorf("event %q", got)
	}
}

// TestWriterRefused: a 403 is an error that says where, and is refused
// for good.
func TestWriterRefused(t *testing.T) {
	w, c, _ := writerRig(t, false)
	c.PrependReactor("patch", "nodes", func(k8stesting.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("RBAC"))
	})
	_, err := w.Patch(context.Background(), []byte(`{}`), v1.NodeCondition{})
	if err == nil || !strings.Contains(err.Error(), "patch node n1 status") || !RefusedForGood(err) {
		t.Errorf("err %v, want a refusal for good naming the node", err)
	}
}

// TestBackoff: doubling from 200ms to 4s, minus at most 20% jitter; a
// refusal for good from 4s up to 5m; success resets.
func TestBackoff(t *testing.T) {
	b := NewBackoff(0, 0, 0)
	transient := apierrors.NewServiceUnavailable("away")
	refused := apierrors.NewForbidden(schema.GroupResource{Resource: "nodes"}, "n1", errors.New("RBAC"))
	within := func(d, full time.Duration) bool { return d <= full && d >= full-full/5 }
	for i, full := range []time.Duration{200 * time.Millisecond, 400 * time.Millisecond, 800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond, 4 * time.Second, 4 * time.Second} {
		if d := b.Failed(transient); !within(d, full) {
			t.Errorf("failure %d: wait %v, want %v less at most 20%%", i+1, d, full)
		}
	}
	b.Succeeded()
	if d := b.Failed(transient); !within(d, 200*time.Millisecond) {
		t.Errorf("after a success: wait %v", d)
	}
	var last time.Duration
	for range 12 {
		last = b.Failed(refused)
	}
	if !within(last, 5*time.Minute) {
		t.Errorf("refused for good 12 times: wait %v, want 5m", last)
	}
	if b.Failures != 13 {
		t.Errorf("failures %d", b.Failures)
	}
}
