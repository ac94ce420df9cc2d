//go:build e2e

package e2e

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/internal/daemontest"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
)

// The daemon's defaults, which the scenarios keep.
const (
	quietWindow = 500 * time.Millisecond
	settle      = 3 * time.Second
)

// budgetNamespace holds the restart budget's Leases of the hotplugd
// processes the tests run on the host (main_test.go creates it).
const budgetNamespace = "hotplugd-e2e-budget"

// startHotplugd runs `hotplugd run --remedy=restart-kubelet` for k's Node,
// with k's configuration, root directory and restart script (the
// supervisor's restart, with preflight in the kubelet's start), the default
// quiet window and settle time, and extra flags; it waits until the daemon
// has found the Node current (condition False). It is stopped when t ends.
func startHotplugd(t *testing.T, s *suite, k *kubelet, extra ...string) *daemontest.Daemon {
	t.Helper()
	args := append([]string{
		"--node-name", nodeName, "--kubeconfig", s.kubeconfig,
		"--kubelet-config", k.Config, "--kubelet-root-dir", k.RootDir,
		"--remedy", "restart-kubelet", "--restart-budget-namespace", budgetNamespace,
		"--kubelet-restart-command", k.RestartScript,
	}, extra...)
	d := daemontest.Start(t, s.hotplugd, nil, args...)
	// Cut short, the run kills it before it stops the kubelet, so that it
	// asks for no restart meanwhile (one already asked goes on detached, and
	// its start refuses once the run is cut short); its own t.Cleanup stops
	// it otherwise.
	emergency.pushAbortOnly(t, "kill hotplugd", func() { d.Cmd.Process.Kill() })
	if _, n, ok := waitNode(t, s, time.Now(), 10*time.Second, conditionIs(v1.ConditionFalse)); !ok {
		t.Fatalf("hotplugd did not find the Node current within 10s: condition %+v; log:\n%s", staleCondition(n), d.Dump())
	}
	return d
}

// remedyDone waits for the daemon's next successful remedy after mark and
// returns how long it took (the restart asked of the supervisor and waited
// for, a new kubelet process, healthz, Node verified). The daemon must have
// asked for exactly one restart, through the restart command.
func remedyDone(t *testing.T, d *daemontest.Daemon, mark int, timeout time.Duration) time.Duration {
	t.Helper()
	e, ok := d.WaitForFrom(mark, timeout, func(e daemontest.Entry) bool {
		return e.Msg == "remedy done" || e.Msg == "remedy failed"
	})
	if !ok {
		t.Fatalf("no remedy within %v; log:\n%s", timeout, d.Dump())
	}
	if e.Msg != "remedy done" || e.Str("outcome") != "remediated" {
		t.Fatalf("remedy: %s", e.RawLine)
	}
	// zap's production encoder writes durations as seconds.
	secs, ok := e.Fields["took"].(float64)
	if !ok {
		t.Fatalf("remedy done without a duration: %s", e.RawLine)
	}
	took := time.Duration(secs * float64(time.Second))
	var asked []daemontest.Entry
	for _, e := range d.Since(mark) {
		if e.Msg == restartAsked {
			asked = append(asked, e)
		}
	}
	if len(asked) != 1 || asked[0].Str("via") != "restart command" {
		t.Errorf("%d log lines %q, want 1 with via \"restart command\": %v", len(asked), restartAsked, asked)
	}
	return took
}

// restartAsked is the daemon's log line when it asks the kubelet's
// supervisor for a restart.
const restartAsked = "asking the kubelet's supervisor to restart it"

// askedRestart is the daemon's first restartAsked entry after mark.
func askedRestart(t *testing.T, d *daemontest.Daemon, mark int) daemontest.Entry {
	t.Helper()
	for _, e := range d.Since(mark) {
		if e.Msg == restartAsked {
			return e
		}
	}
	t.Fatalf("no %q after the change; log:\n%s", restartAsked, d.Dump())
	return daemontest.Entry{}
}

// timeline reads the scripts' calls after the change at t0: "restart
// +3.60 s, stop +3.61 s, preflight +3.70 s, start +3.75 s".
func timeline(k *kubelet, t0 time.Time) string {
	var parts []string
	for _, c := range k.callsSince(t0) {
		parts = append(parts, fmt.Sprintf("%s +%.2f s", c.what, c.at.Sub(t0).Seconds()))
	}
	return strings.Join(parts, ", ")
}

// checkRemedy checks what every remedy must leave: within the time
// bound, one restart asked of the supervisor since t0 and nothing else
// (restart, stop, preflight, start: the scripts and the daemon agree), the
// preflight in the kubelet's start ended, the condition False again and the
// Remediated Event; total is the daemon's restarts so far.
func checkRemedy(t *testing.T, s *suite, d *daemontest.Daemon, k *kubelet, t0 time.Time, took, restart time.Duration, total float64) {
	t.Helper()
	if limit := quietWindow + settle + restart + 5*time.Second; took > limit {
		t.Errorf("change -> Node correct took %v, want at most quiet window + settle + restart + 5 s = %v", took, limit)
	}
	if why := k.oneSupervisedRestart(t0); why != "" {
		t.Errorf("after the change: %s", why)
	}
	if got := d.Metric("hotplugd_kubelet_restarts_total"); got != total {
		t.Errorf("hotplugd_kubelet_restarts_total = %v, want %v", got, total)
	}
	if _, _, ok := waitNode(t, s, time.Now(), 5*time.Second, conditionIs(v1.ConditionFalse)); !ok {
		t.Errorf("condition %s not back to False within 5 s of the Node being correct: %+v", nodepatch.ConditionType, staleCondition(getNode(t, s)))
	}
	if _, alive := k.pid(); !alive {
		t.Errorf("the restarted kubelet is not running; end of its log:\n%s", k.logTail(3000))
	}
}

// remediatedOnce checks that one CapacityDrift and one Remediated Event
// came after before, and no Event of a failed, withheld or refused remedy,
// and returns the Events that came.
func remediatedOnce(t *testing.T, s *suite, before eventCount) eventCount {
	t.Helper()
	events := eventCounts(t, s).since(before)
	if why := notRemediatedOnce(events); why != "" {
		t.Errorf("%s (the restarting kubelet's intermediate reports are no drift)", why)
	}
	return events
}

// notRemediatedOnce says what is wrong with a remedy's Events: not one
// CapacityDrift and one Remediated, or a failed, withheld or refused
// remedy among them; "" when nothing is.
func notRemediatedOnce(events eventCount) string {
	bad := events[nodepatch.ReasonRemediationFailed] + events[nodepatch.ReasonRestartWithheld] + events[nodepatch.ReasonNeedsDrain] + events[nodepatch.ReasonKubeletWouldRefuse]
	if events[nodepatch.ReasonRemediated] != 1 || events[nodepatch.ReasonCapacityDrift] != 1 || bad != 0 {
		return fmt.Sprintf("events %v, want one %s and one %s, and no failed, withheld or refused remedy",
			events, nodepatch.ReasonCapacityDrift, nodepatch.ReasonRemediated)
	}
	return ""
}

// hotplugdWrites are the daemon's API writes so far.
func hotplugdWrites(t *testing.T, d *daemontest.Daemon) float64 {
	t.Helper()
	r := d.Requests()
	return r["create"] + r["patch"]
}

// settleWrites waits until the daemon's write count has not moved for a
// second (its Events and last patch follow the remedy asynchronously) and
// returns it.
func settleWrites(t *testing.T, d *daemontest.Daemon) float64 {
	t.Helper()
	last := hotplugdWrites(t, d)
	for range 10 {
		time.Sleep(time.Second)
		now := hotplugdWrites(t, d)
		if now == last {
			return now
		}
		last = now
	}
	return last
}

// checkStartPreflight checks the one hotplugd preflight run by the
// supervised start in the kubelet's log after offset: it exited 0 without a
// warning, and repaired exactly the state files named in repaired (the
// repair happens there, in the kubelet's start, not in the daemon). It
// returns the run.
func checkStartPreflight(t *testing.T, k *kubelet, offset int, repaired ...string) startPreflight {
	t.Helper()
	run := k.onePreflight(t, offset)
	if run.exit != 0 || strings.Contains(run.report, "hotplugd preflight: warning") {
		t.Errorf("preflight in the kubelet's start exited %d, want 0 without a warning:\n%s", run.exit, run.report)
	}
	for _, f := range []string{preflight.CPUManagerState, preflight.MemoryManagerState} {
		want := slices.Contains(repaired, f)
		if got := strings.Contains(run.report, f+": "+string(preflight.Repaired)+" "); got != want {
			t.Errorf("preflight in the kubelet's start: %s repaired %v, want %v:\n%s", f, got, want, run.report)
		}
	}
	return run
}
