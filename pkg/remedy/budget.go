package remedy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"go.uber.org/zap"

	"github.com/hotplugd/hotplugd/pkg/budget"
)

// takeBudget asks the cluster-wide restart budget for a hold before a
// restart: the hold, or, when every Lease is another node's or the API
// server could not be asked, nil and the wait until the next try. Without
// a budget: nil, nil.
func (m *Remedier) takeBudget(ctx context.Context, key string) (*budget.Hold, *BudgetWait) {
	b := m.o.Budget
	if b == nil {
		return nil, nil
	}
	var err error
	select {
	case <-m.settled:
	case <-ctx.Done():
		err = ctx.Err()
	}
	var h *budget.Hold
	if err == nil {
		h, err = b.Acquire(ctx)
	}
	if err == nil {
		m.metrics.budget.WithLabelValues("taken").Inc()
		m.log.Info("holding the cluster's restart budget", zap.String("lease", h.Slot()))
		return h, nil
	}
	// Spread over ±half the poll, so that waiting nodes do not ask in step.
	poll := m.o.BudgetPoll
	until := m.clock.Now().Add(poll/2 + rand.N(poll+1))
	w := &BudgetWait{Key: key, Until: until,
		Note: fmt.Sprintf("waiting for the cluster's restart budget (at most %d kubelet restarts at once)", b.Slots())}
	next := until.UTC().Format(time.RFC3339)
	var ex *budget.Exhausted
	if errors.As(err, &ex) {
		m.metrics.budget.WithLabelValues("exhausted").Inc()
		w.Why = fmt.Sprintf("waiting for the cluster's restart budget (%d at once), held by %v; trying again at %s", b.Slots(), ex.Holders, next)
		m.log.Info("the cluster's restart budget is taken: waiting", zap.Strings("holders", ex.Holders), zap.Time("next_try", until))
	} else {
		m.metrics.budget.WithLabelValues("error").Inc()
		w.Why = fmt.Sprintf("the cluster's restart budget could not be asked (%v): no restart without it; trying again at %s", err, next)
		m.log.Warn("the cluster's restart budget could not be asked: not restarting", zap.Error(err), zap.Time("next_try", until))
	}
	return nil, w
}

// keepHold renews h every BudgetRenew until the returned stop is called.
// A renewal that fails is logged: the restart asked for goes on, and the
// hold lasts its duration from the last renewal.
func (m *Remedier) keepHold(h *budget.Hold) (stop func()) {
	if h == nil {
		return func() {}
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t := m.clock.NewTicker(m.o.BudgetRenew)
	go func() {
		defer close(done)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C():
			}
			rctx, rcancel := context.WithTimeout(ctx, 10*time.Second)
			err := h.Renew(rctx)
			rcancel()
			if err != nil && ctx.Err() == nil {
				m.log.Warn("renewing the hold of the cluster's restart budget failed", zap.String("lease", h.Slot()), zap.Error(err))
			}
		}
	}()
	return func() {
		cancel()
		<-done
	}
}

// releaseHold gives h back.
func (m *Remedier) releaseHold(h *budget.Hold) {
	if h == nil {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h.Release(ctx); err != nil {
		m.log.Warn("giving back the cluster's restart budget failed: it is freed when the hold expires", zap.String("lease", h.Slot()), zap.Error(err))
		return
	}
	m.log.Info("gave back the cluster's restart budget", zap.String("lease", h.Slot()))
}

// ReleaseOwnBudget gives back any hold of the restart budget this node
// has: one an earlier hotplugd took and left (killed before its restart
// was written down, or after one the next hotplugd settled). Until it
// returned, no hold is taken for a restart.
func (m *Remedier) ReleaseOwnBudget(ctx context.Context) {
	if m.o.Budget == nil {
		return
	}
	defer m.settledOnce.Do(func() { close(m.settled) })
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := m.o.Budget.ReleaseOwn(ctx)
	switch {
	case err != nil:
		m.log.Warn("giving back a hold of the cluster's restart budget an earlier hotplugd left failed: it is freed when the hold expires", zap.Error(err))
	case n > 0:
		m.log.Info("gave back the cluster's restart budget an earlier hotplugd held", zap.Int("leases", n))
	}
}

// reclaimHold takes back, for a restart an earlier hotplugd of this node
// left under way, the hold it had: Acquire finds a Lease this node holds
// first. nil without a budget, or when none can be had (logged: the
// restart goes on whatever the budget says, and the verification with it).
func (m *Remedier) reclaimHold(ctx context.Context) *budget.Hold {
	if m.o.Budget == nil {
		return nil
	}
	h, err := m.o.Budget.Acquire(ctx)
	if err != nil {
		m.log.Warn("the hold of the cluster's restart budget for the restart under way could not be taken back", zap.Error(err))
		return nil
	}
	m.log.Info("holding the cluster's restart budget for the restart under way", zap.String("lease", h.Slot()))
	return h
}
