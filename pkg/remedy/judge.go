package remedy

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"go.uber.org/zap"
	"golang.org/x/sys/unix"

	"github.com/prometheus/procfs"

	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// judgement is what judge found before any restart.
type judgement struct {
	a     Attempt
	done  bool // a has the remedy's end (or no outcome: decide again)
	facts *kubeletwatch.Facts
	dry   preflight.Report
}

// judge runs the steps of a remedy that come before the restart and change
// nothing: the kubelet as it is now, the machine, the kubelet's own
// refusals, the repair preflight will make in the kubelet's start (planned
// in a dry run), and whether the restart would start exactly the kubelet
// that runs now, with what it does to running pods. done: a refused,
// needs-a-person or withheld attempt (journaled), a failed read of the
// machine (not journaled), or no outcome (the kubelet changed: decide
// again). With --dry-run it stops after the planned repair, not done.
func (m *Remedier) judge(ctx context.Context, plan Plan, start time.Time) judgement {
	next := m.next(start)
	facts := m.o.Kubelet.Refresh(ctx)
	j := judgement{a: Attempt{Key: plan.Key}, facts: facts, done: true}
	if !facts.Remediable() {
		m.log.Info("the kubelet changed before the restart; deciding again", zap.String("limits", facts.Limit()))
		return j // no outcome: the next decision sees the new facts
	}
	if st := m.o.Node.State(); st.Prediction != nil {
		if k := Key(*st.Prediction, facts); k != plan.Key {
			m.log.Info("the kubelet changed since the decision; deciding again", zap.String("key", k))
			return j // no outcome
		}
	}
	snap, err := m.o.Snapshot()
	if err != nil {
		j.a.Outcome, j.a.Err = OutcomeFailed, fmt.Errorf("remedy: reading the topology: %w", err)
		return j // not journaled: nothing was done, the next reconcile retries
	}
	if m.o.WouldRefuse != nil {
		if err := m.o.WouldRefuse(facts, snap); err != nil {
			j.a = m.finish(m.refused(j.a, err, next), start)
			return j
		}
	}
	// Plan the repair first: when it needs a person, the kubelet is left
	// running as it is.
	pf := preflightOptions(facts, m.clock.Now())
	pf.DryRun = true
	j.dry = preflight.Run(snap, pf)
	j.a.Report = j.dry
	if m.o.DryRun {
		j.done = false
		return j
	}
	if j.dry.NeedsPerson() {
		j.a = m.finish(m.needsPerson(j.a, next), start)
		return j
	}
	switch r := m.readmission(facts, m.o.Node.State()); {
	case r.refuse != nil:
		j.a = m.finish(m.refused(j.a, r.refuse, next), start)
		return j
	case r.short != nil:
		j.a = m.finish(m.wouldReject(j.a, r, next), start)
		return j
	case r.cannot != "":
		j.a = m.finish(m.withheld(j.a, r.cannot, "drain the node's pods that request the shrinking resources and restart the kubelet yourself, or make the kubelet's root dir readable to hotplugd", next), start)
		return j
	}
	if why, todo := m.withhold(ctx, facts, j.dry, snap); why != "" {
		j.a = m.finish(m.withheld(j.a, why, todo, next), start)
		return j
	}
	j.done = false
	return j
}

// withhold says why a restart must not be made although it would help
// ("" when it may), and what to do. The rule: restart only into what runs
// now, judged by hotplugd, and only where the restart does to running pods
// what the operator accepted.
func (m *Remedier) withhold(ctx context.Context, f *kubeletwatch.Facts, dry preflight.Report, snap *topology.Snapshot) (why, todo string) {
	for _, r := range dry.Results {
		if r.Verdict == preflight.Unknown {
			return fmt.Sprintf("hotplugd cannot judge %s (%s), so it cannot tell whether the kubelet would start on it", r.File, r.Why),
				"check the file (hotplugd preflight --dry-run shows the verdict) and restart the kubelet yourself when it is right; the kubelet judges it at its start"
		}
	}
	if f.ConfigChanged {
		return "the kubelet's configuration changed after the kubelet started (" + f.Limit() + "): a restart would apply a change hotplugd has not judged, perhaps staged for later",
			"restart the kubelet yourself when the change is meant to apply (draining first if it needs that); hotplugd judges the kubelet that then runs"
	}
	if why := binaryChanged(f); why != "" {
		return why, "restart the kubelet yourself when the new binary is meant to run (an upgrade drains first); hotplugd judges the kubelet that then runs"
	}
	if f.Release.ResetsReadinessOnRestart(f.Kubelet.Config.FeatureGates) && !m.o.AllowReadinessReset {
		return fmt.Sprintf("a restart of kubelet %s sets every running container's ready status to false until its readiness probe passes again, taking pods out of their Services (1.34; from 1.35 only with the gate ChangeContainerStatusOnKubeletRestart)", f.Version),
			"restart the kubelet at a time you choose, or let hotplugd do it with --allow-readiness-reset, or upgrade the kubelet to 1.35 or later"
	}
	for _, r := range dry.Results {
		if r.Verdict != preflight.WouldRepair {
			continue
		}
		if why := notWritable(r.Path); why != "" {
			return "the repair of " + r.File + " in the kubelet's start could not be written: " + why,
				"free or remount the file system of " + filepath.Dir(r.Path) + "; the next change of the machine or the kubelet's configuration tries again"
		}
	}
	if m.o.Unit != nil {
		if v := m.o.Unit(ctx, f, needsRepair(f, dry)); v.Why != "" {
			return v.Why, v.Todo
		}
	}
	return "", ""
}

// needsRepair says whether the kubelet's start must run hotplugd preflight
// for a restart to be safe: a state file to repair now, or a static
// resource manager whose state file may need one by the time the kubelet
// starts (the machine can change during the restart).
func needsRepair(f *kubeletwatch.Facts, dry preflight.Report) bool {
	for _, r := range dry.Results {
		if r.Verdict == preflight.WouldRepair {
			return true
		}
	}
	c := f.Kubelet.Config
	return c != nil && (c.CPUManagerPolicy == "static" || c.MemoryManagerPolicy == "Static")
}

// binaryChanged says why the kubelet's binary on disk may not be the one
// that runs ("" when it is, or when no process is known: a kubelet given by
// --kubelet-config is the operator's word). The binary is the path the
// kubelet was executed as (argv[0]: what the unit's ExecStart names); a
// change time after the process's start means it was replaced or changed
// since (a rename or a write sets it, and nothing can set it back), so a
// restart would run a binary, maybe a version, hotplugd has not judged.
// When the binary is unchanged, the running kubelet's version (from its
// Node, when hotplugd cannot run the binary) is the binary's.
func binaryChanged(f *kubeletwatch.Facts) string {
	k := f.Kubelet
	if k.PID == 0 || f.Started.IsZero() || len(k.Cmdline) == 0 {
		return ""
	}
	bin := k.Cmdline[0]
	if !filepath.IsAbs(bin) {
		return fmt.Sprintf("the kubelet was started as %q, not by an absolute path: hotplugd cannot tell which binary a restart would run", bin)
	}
	path := bin
	if k.FSRoot != "" && k.FSRoot != "/" {
		path = filepath.Join(k.FSRoot, bin)
	}
	var st unix.Stat_t
	if err := unix.Stat(path, &st); err != nil {
		return fmt.Sprintf("the kubelet's binary %s cannot be looked at (%v): hotplugd cannot tell whether a restart would run the binary that runs now (in a pod, mount it read-only at the same path)", bin, err)
	}
	ctime := time.Unix(st.Ctim.Unix())
	if ctime.After(f.Started.Add(startSlack)) {
		return fmt.Sprintf("the kubelet's binary %s changed at %s, after the kubelet started at %s: a restart would run a binary hotplugd has not judged",
			bin, ctime.UTC().Format(time.RFC3339), f.Started.UTC().Format(time.RFC3339))
	}
	return ""
}

// startSlack covers the precision of a process start time (a clock tick).
const startSlack = 50 * time.Millisecond

// notWritable says why a repaired file could not be written at path ("" when
// it can, as far as can be told): the file system read-only (its super
// block, not hotplugd's own read-only view of it: preflight writes from the
// kubelet's unit), or too little room for the backup and the new file.
func notWritable(path string) string {
	dir := filepath.Dir(path)
	if ro, err := superReadOnly(dir); err == nil && ro {
		return "the file system of " + dir + " is mounted read-only"
	}
	var s unix.Statfs_t
	if err := unix.Statfs(dir, &s); err != nil {
		return ""
	}
	size := int64(64 << 10)
	if fi, err := os.Stat(path); err == nil {
		size += 2 * fi.Size()
	}
	if free := int64(s.Bavail) * int64(s.Bsize); free < size {
		return fmt.Sprintf("%s has %d bytes free, the repair needs about %d", dir, free, size)
	}
	return ""
}

// superReadOnly reports whether the file system holding dir is read-only
// as a whole: the super options of its mount in /proc/self/mountinfo
// (prometheus/procfs reads it), not the mount's own options.
func superReadOnly(dir string) (bool, error) {
	mounts, err := procfs.GetMounts()
	if err != nil {
		return false, err
	}
	return superReadOnlyIn(mounts, dir)
}

// superReadOnlyIn is superReadOnly over the mounts as read: the deepest
// mount point holding dir decides.
func superReadOnlyIn(mounts []*procfs.MountInfo, dir string) (bool, error) {
	var best *procfs.MountInfo
	for _, m := range mounts {
		mp := m.MountPoint
		if (dir == mp || strings.HasPrefix(dir, strings.TrimSuffix(mp, "/")+"/")) && (best == nil || len(mp) >= len(best.MountPoint)) {
			best = m
		}
	}
	if best == nil {
		return false, errors.New("no mount holds " + dir)
	}
	_, ro := best.SuperOptions["ro"]
	return ro, nil
}

// refused: the kubelet would not start; it is left running as it is.
func (m *Remedier) refused(a Attempt, err error, next string) Attempt {
	a.Outcome, a.Err = OutcomeRefused, err
	a.Reason, a.Warning = nodepatch.ReasonKubeletWouldRefuse, true
	a.Message = fmt.Sprintf("the kubelet was not restarted: it would refuse to start on this machine: %v; what to do: fix the kubelet's configuration (a restart by anyone would fail the same way); reporting only until the machine or the kubelet's configuration changes (not before %s)", err, next)
	return a
}

// withheld: a restart would help, but hotplugd cannot judge what it would
// start or accept what it would do; the kubelet is left running as it is.
func (m *Remedier) withheld(a Attempt, why, todo, next string) Attempt {
	a.Outcome, a.Err = OutcomeWithheld, errors.New(why)
	a.Reason, a.Warning = nodepatch.ReasonRestartWithheld, true
	a.Message = fmt.Sprintf("the kubelet was not restarted: %s; what to do: %s; reporting only until the machine or the kubelet's configuration changes (not before %s)", why, todo, next)
	return a
}

// needsPerson: a state file needs a person; the kubelet is left running as
// it is. What to do names the pods to drain first (namespace/name where
// the kubelet's pod log directory has them, else the UID).
func (m *Remedier) needsPerson(a Attempt, next string) Attempt {
	a.Outcome = OutcomeNeedsPerson
	var why, todo, pods []string
	seen := map[string]bool{}
	for _, r := range a.Report.Results {
		if r.Verdict == preflight.NeedsPerson {
			why = append(why, r.File+": "+r.Why)
			todo = append(todo, r.Todo)
			for _, p := range r.Drain {
				if !seen[p.UID] {
					seen[p.UID] = true
					pods = append(pods, p.String())
				}
			}
		}
	}
	if len(pods) > 0 {
		todo = append([]string{"drain pods " + strings.Join(pods, ", ")}, todo...)
	}
	a.Err = errors.New(strings.Join(why, "; "))
	a.Reason, a.Warning = nodepatch.ReasonNeedsDrain, true
	a.Message = fmt.Sprintf("the kubelet was not restarted: %s; what to do: %s; next check when the machine or the kubelet's configuration changes, not before %s",
		strings.Join(why, "; "), strings.Join(todo, "; "), next)
	return a
}

// preflightOptions are the state-file options for the kubelet of f.
func preflightOptions(f *kubeletwatch.Facts, now time.Time) preflight.Options {
	return preflight.Options{RootDir: f.StateDir, PodLogsDir: f.Kubelet.PodLogsDir(), Config: f.Kubelet.Config, Release: f.Release, Version: f.Version,
		AllocatableIgnoresEviction: f.Kubelet.AllocatableIgnoresEviction, Now: now}
}

func oneLine(r preflight.Report) string {
	parts := make([]string, len(r.Results))
	for i, res := range r.Results {
		parts[i] = res.File + " " + string(res.Verdict)
	}
	return strings.Join(parts, ", ")
}
