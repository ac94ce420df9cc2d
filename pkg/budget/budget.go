package budget

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/kubeclient"
)

// LabelBudget is on every Lease of a budget, with the budget's Name, so
// that `kubectl get leases -l hotplugd.io/restart-budget` lists them.
const LabelBudget = "hotplugd.io/restart-budget"

// Options configures a Budget.
type Options struct {
	// Client reaches the API server.
	Client kubeclient.Interface
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
	lock *leaseLock
	rec  record
}

// Slot is the Lease's name.
func (h *Hold) Slot() string { return h.lock.name }

// Acquire takes one Lease of the budget for this node: one it already
// holds, else a free or expired one. One LIST of the budget's Leases (by
// label) finds the candidates, so a node that finds the budget taken made
// one request; only a candidate is read again and written, with the
// resourceVersion read (of two nodes that try the same Lease at once, one
// gets a conflict and tries the next). Leases of slots beyond Slots (a
// budget made smaller) are ignored. *Exhausted when every Lease is held by
// another node; another error when the API server could not be asked (the
// caller must not restart then either).
func (b *Budget) Acquire(ctx context.Context) (*Hold, error) {
	recs, err := b.list(ctx)
	if err != nil {
		return nil, err
	}
	// Its own Lease first: a hotplugd restarted in the middle of its
	// remedy finds the hold it had.
	for i, rec := range recs {
		if rec != nil && rec.HolderIdentity == b.o.Holder {
			if h, _, err := b.try(ctx, i); h != nil || err != nil {
				return h, err
			}
		}
	}
	var holders []string
	var errs []error
	for _, i := range b.order() {
		rec := recs[i]
		switch {
		case rec == nil:
			h, err := b.create(ctx, b.lock(i))
			switch {
			case err == nil:
				return h, nil
			case apierrors.IsAlreadyExists(err):
				// Another node made it since the list: read it.
			default:
				errs = append(errs, err)
				continue
			}
		case b.held(rec):
			holders = append(holders, rec.HolderIdentity)
			continue
		}
		h, holder, err := b.try(ctx, i)
		switch {
		case h != nil:
			return h, nil
		case err != nil:
			errs = append(errs, err)
		default:
			holders = append(holders, holder)
		}
	}
	if len(errs) > 0 {
		return nil, fmt.Errorf("budget: %w", errors.Join(errs...))
	}
	slices.Sort(holders)
	return nil, &Exhausted{Holders: holders}
}

// list reads the budget's Leases: the record of slot i, nil when its
// Lease does not exist.
func (b *Budget) list(ctx context.Context) ([]*record, error) {
	l, err := b.o.Client.CoordinationV1().Leases(b.o.Namespace).List(ctx, metav1.ListOptions{LabelSelector: LabelBudget + "=" + b.o.Name})
	if err != nil {
		return nil, fmt.Errorf("budget: listing the Leases %s/%s-*: %w", b.o.Namespace, b.o.Name, err)
	}
	recs := make([]*record, b.o.Slots)
	for i := range l.Items {
		lease := &l.Items[i]
		slot, ok := strings.CutPrefix(lease.Name, b.o.Name+"-")
		n, err := strconv.Atoi(slot)
		if !ok || err != nil || n < 0 || n >= b.o.Slots || strconv.Itoa(n) != slot {
			continue
		}
		recs[n] = specRecord(&lease.Spec)
	}
	return recs, nil
}

// order is the order in which this node tries the slots: every slot, from
// one that depends on its name, so that nodes that find several slots free
// at once spread over them instead of all trying slot 0 first.
func (b *Budget) order() []int {
	h := fnv.New32a()
	h.Write([]byte(b.o.Holder))
	first := int(h.Sum32() % uint32(b.o.Slots))
	out := make([]int, b.o.Slots)
	for i := range out {
		out[i] = (first + i) % b.o.Slots
	}
	return out
}

// try reads slot i and takes it when it is free, expired or this node's:
// a nil Hold and nil error when another node holds it (holder) or wrote
// it since it was read.
func (b *Budget) try(ctx context.Context, i int) (h *Hold, holder string, err error) {
	lock := b.lock(i)
	rec, err := lock.get(ctx)
	if err != nil {
		return nil, "", err
	}
	if b.held(rec) {
		return nil, rec.HolderIdentity, nil
	}
	h, err = b.take(ctx, lock, rec)
	if apierrors.IsConflict(err) {
		return nil, "(a node that took it just now)", nil
	}
	return h, "", err
}

// ReleaseOwn gives back every Lease of the budget this node holds: a hold
// an earlier hotplugd of this node left (killed after taking it); the
// number released.
func (b *Budget) ReleaseOwn(ctx context.Context) (int, error) {
	recs, err := b.list(ctx)
	if err != nil {
		return 0, err
	}
	n := 0
	var errs []error
	for i, rec := range recs {
		if rec == nil || rec.HolderIdentity != b.o.Holder {
			continue
		}
		h := &Hold{b: b, lock: b.lock(i)}
		if err := h.Release(ctx); err != nil {
			errs = append(errs, err)
			continue
		}
		n++
	}
	return n, errors.Join(errs...)
}

// held is whether rec is another node's live hold.
func (b *Budget) held(rec *record) bool {
	if rec.HolderIdentity == "" || rec.HolderIdentity == b.o.Holder {
		return false
	}
	expires := rec.RenewTime.Add(time.Duration(rec.LeaseDurationSeconds) * time.Second)
	return b.o.Clock.Now().Before(expires)
}

func (b *Budget) lock(slot int) *leaseLock {
	return &leaseLock{
		leases:    b.o.Client.CoordinationV1().Leases(b.o.Namespace),
		namespace: b.o.Namespace, name: b.o.Name + "-" + strconv.Itoa(slot),
		labels: map[string]string{LabelBudget: b.o.Name},
	}
}

func (b *Budget) record(transitions int) record {
	now := metav1.NewTime(b.o.Clock.Now())
	return record{
		HolderIdentity:       b.o.Holder,
		LeaseDurationSeconds: int((b.o.Duration + time.Second - 1) / time.Second),
		AcquireTime:          now,
		RenewTime:            now,
		LeaderTransitions:    transitions,
	}
}

func (b *Budget) create(ctx context.Context, lock *leaseLock) (*Hold, error) {
	rec := b.record(0)
	if err := lock.create(ctx, rec); err != nil {
		return nil, err
	}
	return &Hold{b: b, lock: lock, rec: rec}, nil
}

// take updates a Lease read by lock.get to this node's hold; a conflict
// when another node wrote it since.
func (b *Budget) take(ctx context.Context, lock *leaseLock, old *record) (*Hold, error) {
	transitions := old.LeaderTransitions
	rec := b.record(transitions)
	if old.HolderIdentity == b.o.Holder {
		rec.AcquireTime = old.AcquireTime
	} else {
		rec.LeaderTransitions = transitions + 1
	}
	if err := lock.update(ctx, rec); err != nil {
		return nil, err
	}
	return &Hold{b: b, lock: lock, rec: rec}, nil
}

// Renew moves the hold's renewTime to now. An error when the Lease is no
// longer this node's (it expired and another node took it) or cannot be
// written.
func (h *Hold) Renew(ctx context.Context) error {
	rec, err := h.lock.get(ctx)
	if err != nil {
		return fmt.Errorf("budget: renewing %s: %w", h.Slot(), err)
	}
	if rec.HolderIdentity != h.b.o.Holder {
		return fmt.Errorf("budget: renewing %s: held by %q now", h.Slot(), rec.HolderIdentity)
	}
	h.rec.RenewTime = metav1.NewTime(h.b.o.Clock.Now())
	if err := h.lock.update(ctx, h.rec); err != nil {
		return fmt.Errorf("budget: renewing %s: %w", h.Slot(), err)
	}
	return nil
}

// Release gives the Lease back (no holder), if it is still this node's.
func (h *Hold) Release(ctx context.Context) error {
	rec, err := h.lock.get(ctx)
	if err != nil {
		return fmt.Errorf("budget: releasing %s: %w", h.Slot(), err)
	}
	if rec.HolderIdentity != h.b.o.Holder {
		return nil
	}
	free := *rec
	free.HolderIdentity = ""
	free.RenewTime = metav1.NewTime(h.b.o.Clock.Now())
	if err := h.lock.update(ctx, free); err != nil {
		return fmt.Errorf("budget: releasing %s: %w", h.Slot(), err)
	}
	return nil
}

// Slots is how many nodes may hold the budget at once.
func (b *Budget) Slots() int { return b.o.Slots }

// record is what a Lease says of its holder, as leader election reads it
// (client-go's resourcelock.LeaderElectionRecord).
type record struct {
	HolderIdentity       string
	LeaseDurationSeconds int
	AcquireTime          metav1.Time
	RenewTime            metav1.Time
	LeaderTransitions    int
	Strategy             coordinationv1.CoordinatedLeaseStrategy
	PreferredHolder      string
}

// specRecord reads a Lease's spec (resourcelock.LeaseSpecToLeaderElectionRecord).
func specRecord(spec *coordinationv1.LeaseSpec) *record {
	var r record
	if spec.HolderIdentity != nil {
		r.HolderIdentity = *spec.HolderIdentity
	}
	if spec.LeaseDurationSeconds != nil {
		r.LeaseDurationSeconds = int(*spec.LeaseDurationSeconds)
	}
	if spec.LeaseTransitions != nil {
		r.LeaderTransitions = int(*spec.LeaseTransitions)
	}
	if spec.AcquireTime != nil {
		r.AcquireTime = metav1.Time{Time: spec.AcquireTime.Time}
	}
	if spec.RenewTime != nil {
		r.RenewTime = metav1.Time{Time: spec.RenewTime.Time}
	}
	if spec.PreferredHolder != nil {
		r.PreferredHolder = *spec.PreferredHolder
	}
	if spec.Strategy != nil {
		r.Strategy = *spec.Strategy
	}
	return &r
}

// spec is r as a Lease's spec (resourcelock.LeaderElectionRecordToLeaseSpec).
func (r record) spec() coordinationv1.LeaseSpec {
	duration, transitions := int32(r.LeaseDurationSeconds), int32(r.LeaderTransitions)
	spec := coordinationv1.LeaseSpec{
		HolderIdentity:       &r.HolderIdentity,
		LeaseDurationSeconds: &duration,
		AcquireTime:          &metav1.MicroTime{Time: r.AcquireTime.Time},
		RenewTime:            &metav1.MicroTime{Time: r.RenewTime.Time},
		LeaseTransitions:     &transitions,
	}
	if r.PreferredHolder != "" {
		spec.PreferredHolder = &r.PreferredHolder
	}
	if r.Strategy != "" {
		spec.Strategy = &r.Strategy
	}
	return spec
}

// leaseLock is one Lease of the budget, written with the resourceVersion
// last read or written: client-go's resourcelock.LeaseLock, whose package
// would link client-go's Clientset into hotplugd (pkg/kubeclient says why
// not).
type leaseLock struct {
	leases          kubeclient.LeaseInterface
	namespace, name string
	labels          map[string]string
	lease           *coordinationv1.Lease // as last read or written
}

// get reads the Lease's record.
func (l *leaseLock) get(ctx context.Context) (*record, error) {
	lease, err := l.leases.Get(ctx, l.name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	l.lease = lease
	return specRecord(&lease.Spec), nil
}

// create makes the Lease, with the budget's label.
func (l *leaseLock) create(ctx context.Context, rec record) error {
	lease, err := l.leases.Create(ctx, &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Namespace: l.namespace, Name: l.name, Labels: l.labels},
		Spec:       rec.spec(),
	}, metav1.CreateOptions{})
	if err != nil {
		return err
	}
	l.lease = lease
	return nil
}

// update writes rec over the Lease as last read or written (a conflict
// when it changed since), adding the budget's label.
func (l *leaseLock) update(ctx context.Context, rec record) error {
	if l.lease == nil {
		return fmt.Errorf("budget: %s/%s: updated before it was read", l.namespace, l.name)
	}
	l.lease.Spec = rec.spec()
	if l.lease.Labels == nil {
		l.lease.Labels = map[string]string{}
	}
	maps.Copy(l.lease.Labels, l.labels)
	lease, err := l.leases.Update(ctx, l.lease, metav1.UpdateOptions{})
	if err != nil {
		return err
	}
	l.lease = lease
	return nil
}
