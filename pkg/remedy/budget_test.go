package remedy

import (
	"context"
	"errors"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes/fake"

	"github.com/hotplugd/hotplugd/internal/kubeclienttest"
	"github.com/hotplugd/hotplugd/pkg/budget"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

type noNode struct{}

func (noNode) State() nodepatch.State         { return nodepatch.State{} }
func (noNode) Changed() <-chan struct{}       { return make(chan struct{}) }
func noSnapshot() (*topology.Snapshot, error) { return nil, errors.New("none") }

// TestTakeBudgetAfterStartRelease: a hold an earlier hotplugd of this node
// left is given back at the start before this hotplugd takes one for its
// own restart: takeBudget waits for ReleaseOwnBudget, so the start-up
// release cannot give back the hold just taken.
func TestTakeBudgetAfterStartRelease(t *testing.T) {
	c := fake.NewClientset()
	newB := func() *budget.Budget {
		b, err := budget.New(budget.Options{Client: kubeclienttest.Clientset(c), Namespace: "ns", Name: "r", Slots: 1, Holder: "node-a", Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	// The earlier hotplugd's hold.
	if _, err := newB().Acquire(context.Background()); err != nil {
		t.Fatal(err)
	}
	m, err := New(Options{Budget: newB(), Node: noNode{}, Snapshot: noSnapshot, Kubelet: kubeletwatch.New(kubeletwatch.Options{})})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if h, w := m.takeBudget(ctx, "k"); h != nil || w == nil {
		t.Fatalf("before the start-up release: hold %v, wait %+v; want a wait", h, w)
	}
	m.ReleaseOwnBudget(context.Background())
	h, w := m.takeBudget(context.Background(), "k")
	if h == nil || w != nil {
		t.Fatalf("after the start-up release: hold %v, wait %+v; want the hold", h, w)
	}
	if err := h.Renew(context.Background()); err != nil {
		t.Errorf("the hold taken after the release: %v", err)
	}
}
