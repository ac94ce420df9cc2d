package integration

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	typedcoordinationv1 "k8s.io/client-go/kubernetes/typed/coordination/v1"
	clocktesting "k8s.io/utils/clock/testing"

	"github.com/hotplugd/hotplugd/pkg/budget"
	"github.com/hotplugd/hotplugd/pkg/kubeclient"
)

// TestIntegrationRestartBudget: twelve nodes contend for a budget of two
// through a real API server, each taking a hold, "restarting" and giving
// it back, forty times over: never more than two hold at once (the
// optimistic concurrency of the Leases' resourceVersion decides every
// race), and every node gets its turns. Then a holder that dies (never
// renews, never releases) frees its Lease by expiry: another takes it once
// its duration has passed by the taker's (fake) clock, not a millisecond
// before.
func TestIntegrationRestartBudget(t *testing.T) {
	s := startAPIServer(t)
	c := s.Client()
	// The budget's client is the daemon's own (pkg/kubeclient).
	kc, err := kubeclient.NewForConfig(s.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns, slots, nodes, rounds = "hotplugd-system", 2, 12, 40
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	newBudget := func(holder string, d time.Duration) *budget.Budget {
		b, err := budget.New(budget.Options{Client: kc, Namespace: ns, Name: "hotplugd-restart", Slots: slots, Holder: holder, Duration: d})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}

	var holding, most, turns atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, nodes)
	for i := range nodes {
		wg.Go(func() {
			b := newBudget(fmt.Sprintf("node-%02d", i), time.Minute)
			for done := 0; done < rounds/nodes+1; {
				h, err := b.Acquire(ctx)
				var ex *budget.Exhausted
				if errors.As(err, &ex) {
					continue
				}
				if err != nil {
					errs <- err
					return
				}
				n := holding.Add(1)
				for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
				}
				// The restart: long enough for the others to try.
				time.Sleep(5 * time.Millisecond)
				holding.Add(-1)
				if err := h.Release(ctx); err != nil {
					errs <- err
					return
				}
				turns.Add(1)
				done++
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	if most.Load() > slots || most.Load() < 1 {
		t.Errorf("at most %d nodes held the budget at once, want 1 to %d", most.Load(), slots)
	}
	t.Logf("%d nodes, budget %d: %d holds, at most %d at once", nodes, slots, turns.Load(), most.Load())

	// A holder that dies: both slots taken, one by a node that never comes
	// back, with a 2 s hold. Expiry is judged by the taker's clock: a fake
	// one shared with the dead holder (whose renewTime it wrote) makes it
	// exact, with no waiting.
	clk := clocktesting.NewFakeClock(time.Now())
	withClock := func(holder string, d time.Duration) *budget.Budget {
		b, err := budget.New(budget.Options{Client: kc, Namespace: ns, Name: "hotplugd-restart", Slots: slots, Holder: holder, Duration: d, Clock: clk})
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	dead, alive, waiting := withClock("node-dead", 2*time.Second), withClock("node-alive", time.Minute), withClock("node-waiting", time.Minute)
	hd, err := dead.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := alive.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	clk.Step(2*time.Second - time.Millisecond)
	var ex *budget.Exhausted
	if _, err := waiting.Acquire(ctx); !errors.As(err, &ex) {
		t.Fatalf("node-waiting 1.999 s after node-dead's hold: %v, want the budget exhausted", err)
	}
	clk.Step(time.Millisecond)
	h, err := waiting.Acquire(ctx)
	if err != nil {
		t.Fatalf("node-waiting 2 s after node-dead's hold: %v, want node-dead's Lease", err)
	}
	if h.Slot() != hd.Slot() {
		t.Errorf("node-waiting took %s, want node-dead's %s", h.Slot(), hd.Slot())
	}
}

// racingClient is the daemon's client whose Lease updates, while race is
// set, come just after another node's write of the same Lease (through
// admin): the race the Leases' resourceVersion decides, made to happen
// every time.
type racingClient struct {
	kubeclient.Interface
	admin kubernetes.Interface
	race  *atomic.Bool
}

func (r racingClient) CoordinationV1() kubeclient.CoordinationV1Interface { return r }

func (r racingClient) Leases(ns string) kubeclient.LeaseInterface {
	return racingLeases{r.Interface.CoordinationV1().Leases(ns), r.admin.CoordinationV1().Leases(ns), r.race}
}

type racingLeases struct {
	kubeclient.LeaseInterface
	admin typedcoordinationv1.LeaseInterface
	race  *atomic.Bool
}

func (l racingLeases) Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error) {
	if l.race.Load() {
		cur, err := l.admin.Get(ctx, lease.Name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		metav1.SetMetaDataAnnotation(&cur.ObjectMeta, "test/raced", time.Now().Format(time.RFC3339Nano))
		if _, err := l.admin.Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
			return nil, err
		}
	}
	return l.LeaseInterface.Update(ctx, lease, opts)
}

// TestIntegrationBudgetRace: a node whose take or renewal of a Lease comes
// just after another node's write of it loses, by the Lease's
// resourceVersion on a real API server: the budget exhausted for the
// taker, an error for the renewal. An update without the version the
// Lease was read at would win both races and let two nodes hold one slot.
func TestIntegrationBudgetRace(t *testing.T) {
	s := startAPIServer(t)
	c := s.Client()
	kc, err := kubeclient.NewForConfig(s.RestConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	const ns = "hotplugd-system"
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var race atomic.Bool
	b, err := budget.New(budget.Options{Client: racingClient{kc, c, &race}, Namespace: ns, Name: "hotplugd-restart", Slots: 1, Holder: "node-a", Duration: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	// The Lease exists and is free: taken, then given back.
	h, err := b.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if err := h.Release(ctx); err != nil {
		t.Fatal(err)
	}

	race.Store(true)
	var ex *budget.Exhausted
	if h, err := b.Acquire(ctx); !errors.As(err, &ex) {
		t.Fatalf("a take that lost the race: hold %v, error %v; want the budget exhausted", h, err)
	}
	race.Store(false)
	if h, err = b.Acquire(ctx); err != nil {
		t.Fatal(err)
	}
	race.Store(true)
	if err := h.Renew(ctx); !apierrors.IsConflict(err) {
		t.Errorf("a renewal that lost the race: %v, want a conflict", err)
	}
}
