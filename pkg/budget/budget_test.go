package budget

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hotplugd/hotplugd/internal/kubeclienttest"
)

func newBudget(t *testing.T, c kubernetes.Interface, clk *clocktesting.FakeClock, holder string, slots int) *Budget {
	t.Helper()
	b, err := New(Options{Client: kubeclienttest.Clientset(c), Namespace: "hotplugd-system", Name: "hotplugd-restart", Slots: slots, Holder: holder, Duration: 90 * time.Second, Clock: clk})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func acquire(t *testing.T, b *Budget) *Hold {
	t.Helper()
	h, err := b.Acquire(context.Background())
	if err != nil {
		t.Fatalf("%s: Acquire: %v", b.o.Holder, err)
	}
	return h
}

// TestBudget: two slots among four nodes: two hold, the third is told who
// holds them; a release frees a slot for it; a holder that stops renewing
// loses its slot to another once its Lease expired, and its renewal then
// fails; a node that holds a slot gets the same one again.
func TestBudget(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC))
	a, b, cc, d := newBudget(t, c, clk, "node-a", 2), newBudget(t, c, clk, "node-b", 2), newBudget(t, c, clk, "node-c", 2), newBudget(t, c, clk, "node-d", 2)

	ha := acquire(t, a)
	hb := acquire(t, b)
	if ha.Slot() == hb.Slot() {
		t.Fatalf("node-a and node-b both hold %s", ha.Slot())
	}
	_, err := cc.Acquire(ctx)
	var ex *Exhausted
	if !errors.As(err, &ex) || !slices.Equal(ex.Holders, []string{"node-a", "node-b"}) {
		t.Fatalf("node-c: %v, want the budget exhausted by node-a and node-b", err)
	}

	// The same node again: its own slot, its acquire time kept.
	clk.Step(10 * time.Second)
	again := acquire(t, a)
	if again.Slot() != ha.Slot() || !again.rec.AcquireTime.Equal(&ha.rec.AcquireTime) {
		t.Errorf("node-a again: %s acquired %v, want %s acquired %v", again.Slot(), again.rec.AcquireTime, ha.Slot(), ha.rec.AcquireTime)
	}

	if err := ha.Release(ctx); err != nil {
		t.Fatal(err)
	}
	hc := acquire(t, cc)
	if hc.Slot() != ha.Slot() || hc.rec.LeaderTransitions != 1 {
		t.Errorf("node-c took %s (transitions %d), want node-a's released %s (1)", hc.Slot(), hc.rec.LeaderTransitions, ha.Slot())
	}

	// node-b renews, then dies: its Lease is held until 90 s after its
	// last renewal, and free after.
	clk.Step(30 * time.Second)
	if err := hb.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(60 * time.Second)
	if err := hc.Renew(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(29 * time.Second)
	if _, err := d.Acquire(ctx); !errors.As(err, &ex) {
		t.Fatalf("node-d 89 s after node-b's renewal: %v, want exhausted", err)
	}
	clk.Step(2 * time.Second)
	hd := acquire(t, d)
	if hd.Slot() != hb.Slot() {
		t.Errorf("node-d took %s, want node-b's expired %s", hd.Slot(), hb.Slot())
	}
	if err := hb.Renew(ctx); err == nil {
		t.Error("node-b renewed a Lease node-d holds")
	}
	// node-b's release of a Lease that is no longer its own changes nothing.
	if err := hb.Release(ctx); err != nil {
		t.Fatal(err)
	}
	l, err := c.CoordinationV1().Leases("hotplugd-system").Get(ctx, hd.Slot(), metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if *l.Spec.HolderIdentity != "node-d" || l.Labels[LabelBudget] != "hotplugd-restart" || *l.Spec.LeaseDurationSeconds != 90 {
		t.Errorf("Lease %s: holder %q, labels %v, duration %d", l.Name, *l.Spec.HolderIdentity, l.Labels, *l.Spec.LeaseDurationSeconds)
	}
}

func TestNewRefuses(t *testing.T) {
	c := fake.NewClientset()
	ok := Options{Client: kubeclienttest.Clientset(c), Namespace: "ns", Name: "n", Slots: 1, Holder: "h", Duration: time.Minute}
	for name, edit := range map[string]func(*Options){
		"no client": func(o *Options) { o.Client = nil },
		"no slots":  func(o *Options) { o.Slots = 0 },
		"no holder": func(o *Options) { o.Holder = "" },
		"no name":   func(o *Options) { o.Name = "" },
		"too short": func(o *Options) { o.Duration = 500 * time.Millisecond },
	} {
		o := ok
		edit(&o)
		if _, err := New(o); err == nil {
			t.Errorf("%s: New accepted %+v", name, o)
		}
	}
	if _, err := New(ok); err != nil {
		t.Error(err)
	}
}

// TestAcquireCost: a node that finds the budget taken made one request (a
// LIST of the budget's Leases); Leases of slots beyond the budget (made
// smaller since) are neither counted nor taken.
func TestAcquireCost(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC))
	// Three slots taken by a, b, c; then the budget is 2.
	for _, h := range []string{"node-a", "node-b", "node-c"} {
		acquire(t, newBudget(t, c, clk, h, 3))
	}
	c.ClearActions()
	_, err := newBudget(t, c, clk, "node-d", 2).Acquire(ctx)
	var ex *Exhausted
	if !errors.As(err, &ex) || len(ex.Holders) != 2 {
		t.Fatalf("node-d: %v, want the 2 slots held", err)
	}
	if a := c.Actions(); len(a) != 1 || a[0].GetVerb() != "list" {
		t.Errorf("node-d's try made %d requests (%v), want one list", len(a), a)
	}
	// The holder of slot 2, beyond the budget of 2, has no hold in it.
	l, err := c.CoordinationV1().Leases("hotplugd-system").Get(ctx, "hotplugd-restart-2", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	outside := *l.Spec.HolderIdentity
	if _, err := newBudget(t, c, clk, outside, 2).Acquire(ctx); !errors.As(err, &ex) {
		t.Errorf("%s with a budget of 2: %v, want exhausted (its slot 2 is outside)", outside, err)
	}
}

// TestReleaseOwn gives back the holds this node has, and no other.
func TestReleaseOwn(t *testing.T) {
	ctx := context.Background()
	c := fake.NewClientset()
	clk := clocktesting.NewFakeClock(time.Date(2026, 11, 27, 5, 0, 0, 0, time.UTC))
	a, b := newBudget(t, c, clk, "node-a", 2), newBudget(t, c, clk, "node-b", 2)
	acquire(t, a)
	hb := acquire(t, b)
	if n, err := a.ReleaseOwn(ctx); n != 1 || err != nil {
		t.Fatalf("ReleaseOwn: %d, %v; want 1", n, err)
	}
	if n, err := a.ReleaseOwn(ctx); n != 0 || err != nil {
		t.Fatalf("ReleaseOwn again: %d, %v; want 0", n, err)
	}
	if err := hb.Renew(ctx); err != nil {
		t.Errorf("node-b's hold after node-a gave its own back: %v", err)
	}
	if h := acquire(t, newBudget(t, c, clk, "node-c", 2)); h.Slot() == hb.Slot() {
		t.Errorf("node-c took node-b's slot %s", h.Slot())
	}
}
