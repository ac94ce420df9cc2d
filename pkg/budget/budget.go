package budget

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"
)

// LabelBudget is on every Lease of a budget, with the budget's Name, so
// that `kubectl get leases -l hotplugd.io/restart-budget` lists them.
const LabelBudget = "hotplugd.io/restart-budget"

// Options configures a Budget.
type Options struct {
	// Client reaches the API server.
	Client kubernetes.Interface
	// Namespace holds the Leases.
	Namespace string
	// Name prefixes the Leases' names: <Name>-<slot>.
	Name string
	// Slots is how many nodes may hold the budget at once, at least 1.
	Slots int
	// Holder is this node's identity in the Leases: its Node's name.
	Holder string
	// Duration is how long a hold lasts without a renewal: a holder that
	// dies frees its Lease this long after its last renewal.
	Duration time.Duration
	// Clock is the taker's clock for judging expiry; nil: the real one.
	Clock clock.PassiveClock
}

// Budget is one node's view of the cluster-wide restart budget.
type Budget struct {
	o Options
}

// New checks o and returns the node's Budget.
func New(o Options) (*Budget, error) {
	switch {
	case o.Client == nil:
		return nil, errors.New("budget: no API client")
	case o.Namespace == "" || o.Name == "":
		return nil, errors.New("budget: the Leases need a namespace and a name")
	case o.Slots < 1:
		return nil, fmt.Errorf("budget: %d slots: at least 1 node must be able to restart", o.Slots)
	case o.Holder == "":
		return nil, errors.New("budget: no holder identity (the node's name)")
	case o.Duration < time.Second:
		return nil, fmt.Errorf("budget: a hold of %v: at least 1s", o.Duration)
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	return &Budget{o: o}, nil
}

// Exhausted is Acquire's error when every Lease is held by another node.
type Exhausted struct {
	// Holders are the nodes that hold the Leases, sorted.
	Holders []string
}

func (e *Exhausted) Error() string {
	return fmt.Sprintf("the cluster's restart budget (%d at once) is taken by %v", len(e.Holders), e.Holders)
}

// Hold is a node's hold of one Lease of the budget.
type Hold struct {
	b    *Budget
	lock *resourcelock.LeaseLock
	rec  resourcelock.LeaderElectionRecord
}

// Slot is the Lease's name.
func (h *Hold) Slot() string { return h.lock.LeaseMeta.Name }

// Acquire takes one Lease of the budget for this node: one it already
// holds, else a free or expired one, trying each once. *Exhausted when
// every Lease is held by another node; another error when the API server
// could not be asked (the caller must not restart then either).
func (b *Budget) Acquire(ctx context.Context) (*Hold, error) {
	var holders []string
	var errs []error
	// Its own Lease first: a hotplugd restarted in the middle of its
	// remedy finds the hold it had.
	locks := make([]*resourcelock.LeaseLock, b.o.Slots)
	recs := make([]*resourcelock.LeaderElectionRecord, b.o.Slots)
	for i := range locks {
		locks[i] = b.lock(i)
		rec, _, err := locks[i].Get(ctx)
		switch {
		case apierrors.IsNotFound(err):
			continue
		case err != nil:
			errs = append(errs, err)
			continue
		}
		recs[i] = rec
		if rec.HolderIdentity == b.o.Holder {
			return b.take(ctx, locks[i], rec)
		}
	}
	for i, lock := range locks {
		rec := recs[i]
		if rec == nil {
			h, err := b.create(ctx, lock)
			if err == nil {
				return h, nil
			}
			if !apierrors.IsAlreadyExists(err) {
				errs = append(errs, err)
			}
			continue
		}
		if b.held(rec) {
			holders = append(holders, rec.HolderIdentity)
			continue
		}
		h, err := b.take(ctx, lock, rec)
		if err == nil {
			return h, nil
		}
		if !apierrors.IsConflict(err) {
			errs = append(errs, err)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("budget: %w", errors.Join(errs...))
	}
	slices.Sort(holders)
	return nil, &Exhausted{Holders: holders}
}

// held is whether rec is another node's live hold.
func (b *Budget) held(rec *resourcelock.LeaderElectionRecord) bool {
	if rec.HolderIdentity == "" || rec.HolderIdentity == b.o.Holder {
		return false
	}
	expires := rec.RenewTime.Add(time.Duration(rec.LeaseDurationSeconds) * time.Second)
	return b.o.Clock.Now().Before(expires)
}

func (b *Budget) lock(slot int) *resourcelock.LeaseLock {
	return &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: b.o.Namespace, Name: b.o.Name + "-" + strconv.Itoa(slot)},
		Client:     b.o.Client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: b.o.Holder},
		Labels:     map[string]string{LabelBudget: b.o.Name},
	}
}

func (b *Budget) record(transitions int) resourcelock.LeaderElectionRecord {
	now := metav1.NewTime(b.o.Clock.Now())
	return resourcelock.LeaderElectionRecord{
		HolderIdentity:       b.o.Holder,
		LeaseDurationSeconds: int((b.o.Duration + time.Second - 1) / time.Second),
		AcquireTime:          now,
		RenewTime:            now,
		LeaderTransitions:    transitions,
	}
}

func (b *Budget) create(ctx context.Context, lock *resourcelock.LeaseLock) (*Hold, error) {
	rec := b.record(0)
	if err := lock.Create(ctx, rec); err != nil {
		return nil, err
	}
	return &Hold{b: b, lock: lock, rec: rec}, nil
}

// take updates a Lease read by lock.Get to this node's hold; a conflict
// when another node wrote it since.
func (b *Budget) take(ctx context.Context, lock *resourcelock.LeaseLock, old *resourcelock.LeaderElectionRecord) (*Hold, error) {
	transitions := old.LeaderTransitions
	rec := b.record(transitions)
	if old.HolderIdentity == b.o.Holder {
		rec.AcquireTime = old.AcquireTime
	} else {
		rec.LeaderTransitions = transitions + 1
	}
	if err := lock.Update(ctx, rec); err != nil {
		return nil, err
	}
	return &Hold{b: b, lock: lock, rec: rec}, nil
}

// Renew moves the hold's renewTime to now. An error when the Lease is no
// longer this node's (it expired and another node took it) or cannot be
// written.
func (h *Hold) Renew(ctx context.Context) error {
	rec, _, err := h.lock.Get(ctx)
	if err != nil {
		return fmt.Errorf("budget: renewing %s: %w", h.Slot(), err)
	}
	if rec.HolderIdentity != h.b.o.Holder {
		return fmt.Errorf("budget: renewing %s: held by %q now", h.Slot(), rec.HolderIdentity)
	}
	h.rec.RenewTime = metav1.NewTime(h.b.o.Clock.Now())
	if err := h.lock.Update(ctx, h.rec); err != nil {
		return fmt.Errorf("budget: renewing %s: %w", h.Slot(), err)
	}
	return nil
}

// Release gives the Lease back (no holder), if it is still this node's.
func (h *Hold) Release(ctx context.Context) error {
	rec, _, err := h.lock.Get(ctx)
	if err != nil {
		return fmt.Errorf("budget: releasing %s: %w", h.Slot(), err)
	}
	if rec.HolderIdentity != h.b.o.Holder {
		return nil
	}
	free := *rec
	free.HolderIdentity = ""
	free.RenewTime = metav1.NewTime(h.b.o.Clock.Now())
	if err := h.lock.Update(ctx, free); err != nil {
		return fmt.Errorf("budget: releasing %s: %w", h.Slot(), err)
	}
	return nil
}
