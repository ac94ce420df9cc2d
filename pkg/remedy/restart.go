package remedy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"go.uber.org/zap"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/internal/faultpoint"
	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
)

// restart is the remedy itself: judge, write the restart down, ask the
// kubelet's supervisor for it, verify. hotplugd never stops or starts the
// kubelet itself and never writes its state files: the supervisor's restart
// runs hotplugd preflight in the kubelet's start, which repairs them with
// the machine as it is then. Nothing of hotplugd's stands between the
// kubelet's stop and its start, so a hotplugd killed at any moment leaves
// the kubelet to its supervisor.
func (m *Remedier) restart(ctx context.Context, plan Plan, start time.Time) Attempt {
	next := m.next(start)
	j := m.judge(ctx, plan, start)
	if j.done {
		return j.a
	}
	a := j.a
	if m.o.DryRun {
		return m.planOnly(plan, a)
	}
	// The cluster-wide budget, last: a restart that would be refused or
	// withheld takes no Lease from another node.
	hold, wait := m.takeBudget(ctx, plan.Key)
	if wait != nil {
		return Attempt{Key: plan.Key, Budget: wait} // nothing tried
	}
	stop := m.keepHold(hold)
	a = m.restartHeld(ctx, plan, start, next, j)
	stop()
	// A restart asked for and then interrupted (hotplugd stopping) keeps
	// its hold: the restart goes on in the supervisor, and the next
	// hotplugd gives the hold back once it verified it (or the hold
	// expires).
	if !(a.Outcome == OutcomeInterrupted && a.Restarted) {
		m.releaseHold(hold)
	}
	return a
}

// restartHeld is the restart once the budget allows it: write it down, ask
// the supervisor, verify.
func (m *Remedier) restartHeld(ctx context.Context, plan Plan, start time.Time, next string, j judgement) Attempt {
	a, facts := j.a, j.facts
	u := journal.Underway{Key: plan.Key, Phase: journal.PhaseRestarting, Start: start, Drift: plan.Drift.String(), Before: processOf(facts)}
	rec, err := recordKubelet(facts)
	if err == nil {
		u.Kubelet = rec
		err = m.journal.Begin(u)
	}
	if err != nil {
		// Without the record the next hotplugd could not tell a restart
		// it asked for from one someone else did: none.
		a.Outcome, a.Err = OutcomeFailed, fmt.Errorf("remedy: not restarting the kubelet: %w", err)
		return a
	}
	faultpoint.Hit(faultpoint.RemedyRestarting)
	if ctx.Err() != nil {
		// Stopping (SIGTERM) before the supervisor was asked: ask nothing.
		a.Outcome, a.Err = OutcomeInterrupted, errors.New("remedy: hotplugd is stopping: the kubelet was not restarted")
		return m.finish(a, start)
	}
	m.log.Info("asking the kubelet's supervisor to restart it", zap.String("via", m.o.Control.String()), zap.Stringer("drift", plan.Drift),
		zap.String("state_files", oneLine(j.dry)), zap.String("journal", m.journal.Path()))
	a.Restarted = true
	m.metrics.restarts.Inc()
	rctx, cancel := context.WithTimeout(ctx, m.o.OpTimeout)
	rerr := m.o.Control.Restart(rctx)
	cancel()
	faultpoint.Hit(faultpoint.RemedyRestarted)
	if ctx.Err() != nil {
		a.Outcome, a.Err = OutcomeInterrupted, errors.New("remedy: hotplugd is stopping: the restart is the supervisor's; the next hotplugd verifies it")
		return a // the journal keeps it under way
	}
	if rerr != nil {
		m.log.Warn("the supervisor's restart did not end well; verifying what runs", zap.Error(rerr))
	}
	m.enter(journal.PhaseVerifying)
	err = m.verify(ctx, u.Before, facts)
	if err != nil && ctx.Err() != nil {
		a.Outcome, a.Err = OutcomeInterrupted, fmt.Errorf("remedy: hotplugd is stopping during the verification (the next hotplugd verifies it): %w", err)
		return a
	}
	if err != nil && rerr != nil {
		err = fmt.Errorf("%w (the restart through %s: %v)", err, m.o.Control, rerr)
	}
	a = m.verified(a, err, next)
	if a.Outcome == OutcomeRemediated {
		a.Message = fmt.Sprintf("restarted the kubelet (%s); it now reports %s", m.o.Control, plan.Drift.Predicted())
		if s := planned(j.dry); s != "" {
			a.Message += "; " + s + " in its start"
		}
	}
	return m.finish(a, start)
}

// verified turns the verification's result into the attempt's outcome.
func (m *Remedier) verified(a Attempt, err error, next string) Attempt {
	switch {
	case err == nil:
		a.Outcome, a.Reason = OutcomeRemediated, nodepatch.ReasonRemediated
		a.Message = "the kubelet restart is verified: the Node shows the machine"
	case errors.Is(err, ErrNodeUnknown):
		a.Outcome, a.Err = OutcomeUnverified, err
		a.Reason, a.Warning = nodepatch.ReasonRemediationFailed, true
		a.Message = err.Error() + "; the kubelet runs and is left running; the Node's condition says what it reports once it can be read"
	case errors.Is(err, ErrNotRestarted):
		a.Outcome, a.Err = OutcomeFailed, err
		a.Reason, a.Warning = nodepatch.ReasonRemediationFailed, true
		a.Message = err.Error() + "; not tried again for this machine and kubelet configuration (a change of either, or a new value of the Node's annotation " + nodepatch.AnnotationRetry + ", allows one more attempt, not before " + next + ")"
	default:
		a.Outcome, a.Err = OutcomeFailed, err
		a.Reason, a.Warning = nodepatch.ReasonRemediationFailed, true
		a.Message = err.Error() + "; the kubelet is left to its supervisor (hotplugd never stops it); not tried again for this machine and kubelet configuration (a change of either, or a new value of the Node's annotation " + nodepatch.AnnotationRetry + ", allows one more attempt, not before " + next + ")"
	}
	return a
}

// ErrNotRestarted: the kubelet process that ran before the restart was
// asked for still runs: the restart was not carried out.
var ErrNotRestarted = errors.New("the kubelet was not restarted")

// ErrNodeUnknown: the verification could not read the Node at all. The
// kubelet then runs: it is never called failed on that ground.
var ErrNodeUnknown = errors.New("the Node could not be read to verify the kubelet's restart")

// verify waits, within Timeout, for a kubelet process other than before
// (when known), its healthz, then the Node showing the prediction.
func (m *Remedier) verify(parent context.Context, before *journal.Process, f *kubeletwatch.Facts) error {
	ctx, cancel := context.WithTimeout(parent, m.o.Timeout)
	defer cancel()
	if before != nil {
		if err := m.waitNewProcess(ctx, *before); err != nil {
			return err
		}
	}
	if f != nil && f.Kubelet != nil && f.Kubelet.HealthzURL != "" {
		if err := m.waitHealthz(ctx, f.Kubelet.HealthzURL); err != nil {
			return err
		}
	}
	faultpoint.Hit(faultpoint.RemedyVerifying)
	for {
		changed := m.o.Node.Changed()
		st := m.o.Node.State()
		if st.Known() && !st.Drift.Stale() {
			return nil
		}
		select {
		case <-ctx.Done():
			if parent.Err() != nil {
				return parent.Err()
			}
			if !st.Known() {
				return fmt.Errorf("remedy: %w within %v (the API server may be away)", ErrNodeUnknown, m.o.Timeout)
			}
			// The watch keeps the last Node it saw while the API server
			// is away: ask the API server itself before calling the
			// kubelet failed.
			return m.confirmStale(parent, st)
		case <-changed:
		}
	}
}

// confirmStale reads the Node from the API server once (GetNode) when the
// watched Node still shows the drift at the verification's end: a Node
// that cannot be read is ErrNodeUnknown (unverified, not a kubelet
// failure), one that shows the machine is a watch that lagged (verified),
// one that still shows the drift a failure.
func (m *Remedier) confirmStale(ctx context.Context, st nodepatch.State) error {
	stale := fmt.Errorf("remedy: the Node still reports %s after the kubelet restart (waited %v)", st.Drift.Significant(), m.o.Timeout)
	if m.o.GetNode == nil {
		return stale
	}
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	n, err := m.o.GetNode(ctx)
	if err != nil {
		return fmt.Errorf("remedy: %w: the watched Node still showed %s after %v, and reading it again failed: %v (the API server may be away)",
			ErrNodeUnknown, st.Drift.Significant(), m.o.Timeout, err)
	}
	if d := nodepatch.Compare(*st.Prediction, n.Status, m.o.MinMemoryDelta); d.Stale() {
		return fmt.Errorf("remedy: the Node still reports %s after the kubelet restart (waited %v)", d.Significant(), m.o.Timeout)
	}
	return nil
}

// waitNewProcess waits for the kubelet process to be another than before.
func (m *Remedier) waitNewProcess(ctx context.Context, before journal.Process) error {
	for {
		p := processOf(m.o.Kubelet.Refresh(ctx))
		if p != nil && *p != before {
			return nil
		}
		select {
		case <-ctx.Done():
			switch {
			case ctx.Err() != context.DeadlineExceeded:
				return ctx.Err()
			case p == nil:
				// The old one is gone: the restart was carried out
				// (by someone) and the new kubelet does not run.
				return fmt.Errorf("remedy: %w within %v after the restart (its start failed, or takes longer: the supervisor's restart policy and journalctl -u kubelet say which)", ErrNoKubelet, m.o.Timeout)
			default:
				return fmt.Errorf("remedy: %w: its process %d (start %d) still runs after %v", ErrNotRestarted, before.PID, before.Start, m.o.Timeout)
			}
		case <-m.clock.After(200 * time.Millisecond):
		}
	}
}

// ErrNoKubelet: no kubelet process runs after the restart.
var ErrNoKubelet = errors.New("no kubelet process runs")

func (m *Remedier) waitHealthz(ctx context.Context, url string) error {
	var last error
	err := wait.PollUntilContextCancel(ctx, 100*time.Millisecond, true, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, fmt.Errorf("remedy: the kubelet's healthz URL %q: %w", url, err)
		}
		resp, err := m.o.HTTP.Do(req)
		if err != nil {
			last = err
			return false, nil
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			last = fmt.Errorf("%s", resp.Status)
			return false, nil
		}
		return true, nil
	})
	if err != nil && last != nil && ctx.Err() != nil {
		return fmt.Errorf("remedy: the kubelet's healthz %s did not answer ok within %v: %v", url, m.o.Timeout, last)
	}
	return err
}

// Recover settles a remedy a previous hotplugd left under way. It never
// stops or restarts the kubelet: the supervisor owned that restart. A
// record young enough is verified; an older one is closed as interrupted.
// A record of the earlier design (hotplugd stopped and started the kubelet
// itself) may mean a stopped kubelet: the supervisor is asked to start it,
// a no-op when it runs.
func (m *Remedier) Recover(ctx context.Context, u journal.Underway) {
	start := m.clock.Now()
	m.log.Warn("a kubelet restart was under way when hotplugd stopped: settling it first",
		zap.String("phase", string(u.Phase)), zap.Time("since", u.Start), zap.String("key", u.Key), zap.String("drift", u.Drift))
	a := Attempt{Key: u.Key, Restarted: true}
	next := m.next(start)
	switch age := start.Sub(u.Start); {
	case u.Phase.Legacy():
		a.Outcome, a.Restarted = OutcomeInterrupted, false
		s, ok := m.o.Control.(Starter)
		if !ok {
			a.Err = fmt.Errorf("remedy: an earlier hotplugd left its own kubelet restart in phase %q, and this hotplugd cannot start the kubelet: make sure it runs (start it through its supervisor)", u.Phase)
			a.Reason, a.Message, a.Warning = nodepatch.ReasonRemediationFailed, a.Err.Error(), true
			break
		}
		sctx, cancel := context.WithTimeout(context.Background(), m.o.OpTimeout)
		err := s.Start(sctx)
		cancel()
		a.Err = fmt.Errorf("remedy: an earlier hotplugd left its own kubelet restart in phase %q: asked the supervisor to start the kubelet (a no-op when it runs)", u.Phase)
		if err != nil {
			a.Err = fmt.Errorf("%w: %v; make sure it runs", a.Err, err)
			a.Reason, a.Message, a.Warning = nodepatch.ReasonRemediationFailed, a.Err.Error(), true
		}
	case age > m.o.UnderwayBound || age < 0:
		a.Outcome, a.Restarted = OutcomeInterrupted, false
		a.Err = fmt.Errorf("remedy: the kubelet restart asked for at %s was never verified and is too old to verify now (more than %v): nothing done", u.Start.UTC().Format(time.RFC3339), m.o.UnderwayBound)
	default:
		// The restart may still run in the supervisor: the hold the
		// earlier hotplugd took for it is taken back (its own Lease, still
		// held) and renewed until the verification ends, so that no other
		// node takes it by expiry while this restart goes on.
		stop := m.keepHold(m.reclaimHold(ctx))
		defer stop()
		facts := m.o.Kubelet.Refresh(ctx)
		if !facts.Remediable() {
			if f, err := factsFrom(u.Kubelet); err == nil {
				facts = f
			}
		}
		err := m.verify(ctx, u.Before, facts)
		if ctx.Err() != nil {
			return // still under way
		}
		unknownAsk := u.Phase == journal.PhaseRestarting && u.Before == nil && err != nil && !errors.Is(err, ErrNodeUnknown)
		if errors.Is(err, ErrNotRestarted) || unknownAsk {
			// Killed before the supervisor was asked (or it refused),
			// or, with no kubelet process known, cannot tell whether it
			// was: nothing to conclude about this key.
			a.Outcome, a.Restarted, a.Err = OutcomeInterrupted, false, err
			break
		}
		a = m.verified(a, err, next)
		if a.Outcome == OutcomeRemediated {
			a.Message = "the kubelet restart a previous hotplugd asked for is verified: the Node shows the machine"
		}
	}
	m.record(m.finish(a, u.Start), start)
	// Settled: the hold this node's earlier hotplugd took for it goes back.
	m.ReleaseOwnBudget(ctx)
}

// processOf is the kubelet process of f (nil when none is known).
func processOf(f *kubeletwatch.Facts) *journal.Process {
	if f == nil || f.Kubelet == nil || f.Kubelet.PID == 0 || f.Start == 0 {
		return nil
	}
	return &journal.Process{PID: f.Kubelet.PID, Start: f.Start}
}

// recordKubelet is what the journal keeps of the kubelet a restart is for.
func recordKubelet(f *kubeletwatch.Facts) (*journal.Kubelet, error) {
	cfg, err := json.Marshal(f.Kubelet.Config)
	if err != nil {
		return nil, fmt.Errorf("remedy: the kubelet's configuration for the journal: %w", err)
	}
	return &journal.Kubelet{Config: cfg, RootDir: f.Kubelet.RootDir, StateDir: f.StateDir, HealthzURL: f.Kubelet.HealthzURL,
		AllocatableIgnoresEviction: f.Kubelet.AllocatableIgnoresEviction, Version: f.Version.String()}, nil
}

// enter writes the next phase down; a journal that cannot be written is
// logged (the restart is the supervisor's: it goes on).
func (m *Remedier) enter(p journal.Phase) {
	if err := m.journal.Enter(p); err != nil {
		m.log.Error("writing the remedy journal failed", zap.String("phase", string(p)), zap.Error(err))
	}
}

// planOnly handles a dry run before anything is touched.
func (m *Remedier) planOnly(plan Plan, a Attempt) Attempt {
	if a.Report.NeedsPerson() {
		a.Outcome = OutcomeNeedsPerson
		m.log.Info("dry run: would not restart the kubelet: a state file needs a person", zap.String("state_files", oneLine(a.Report)))
		return a
	}
	a.Outcome = OutcomeDryRun
	m.log.Info("dry run: would restart the kubelet", zap.String("via", m.o.Control.String()),
		zap.Stringer("drift", plan.Drift), zap.String("state_files", oneLine(a.Report)))
	return a
}

// planned says what preflight will repair in the kubelet's start.
func planned(r preflight.Report) string {
	var parts []string
	for _, res := range r.Results {
		if res.Verdict == preflight.WouldRepair {
			parts = append(parts, res.File)
		}
	}
	if len(parts) == 0 {
		return ""
	}
	return "hotplugd preflight repaired " + joinAnd(parts)
}

func joinAnd(s []string) string {
	switch len(s) {
	case 1:
		return s[0]
	case 2:
		return s[0] + " and " + s[1]
	}
	out := ""
	for i, x := range s {
		switch {
		case i == len(s)-1:
			out += ", and " + x
		case i > 0:
			out += ", " + x
		default:
			out += x
		}
	}
	return out
}

// factsFrom rebuilds the facts a restart began with from the journal (for
// the healthz and the Node check when no kubelet is discovered now).
func factsFrom(k *journal.Kubelet) (*kubeletwatch.Facts, error) {
	if k == nil {
		return nil, errors.New("no kubelet recorded")
	}
	v, err := kubeletversion.Parse(k.Version)
	if err != nil {
		return nil, err
	}
	rel, err := kubeletversion.Lookup(v)
	if err != nil {
		return nil, err
	}
	cfg := &kubeletv1beta1.KubeletConfiguration{}
	if err := json.Unmarshal(k.Config, cfg); err != nil {
		return nil, fmt.Errorf("the recorded configuration: %w", err)
	}
	return &kubeletwatch.Facts{
		Kubelet: &kubeletconfig.Kubelet{Config: cfg, RootDir: k.RootDir, HealthzURL: k.HealthzURL,
			AllocatableIgnoresEviction: k.AllocatableIgnoresEviction},
		Version: v, VersionFrom: "the remedy journal", Release: rel, StateDir: k.StateDir,
	}, nil
}
