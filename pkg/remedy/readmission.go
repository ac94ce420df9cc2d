package remedy

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"

	"go.uber.org/zap"

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
	"github.com/hotplugd/hotplugd/pkg/allocated"
	"github.com/hotplugd/hotplugd/pkg/kubeletwatch"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/podcgroups"
	"github.com/hotplugd/hotplugd/pkg/podnames"
)

// readmission is what a restart's re-admission would do to the pods that
// run: a restarted kubelet admits them again against its new allocatable,
// oldest first, and rejects (kills) each one that no longer fits
// (TestReadmissionAfterShrink shows it with kubelet 1.36). At most one of
// its fields is set.
type readmission struct {
	// short: the pods' requests exceed the new allocatable; names are
	// the pods' names where the pod log directory has them.
	short *allocated.Result
	names kubeletstate.PodNames
	// cannot says why it cannot be told, when allocatable shrinks.
	cannot string
	// refuse: the kubelet would refuse its own checkpoint at its start.
	refuse error
}

// readmission judges the restart's re-admission from the kubelet's own
// checkpoint of the pods it admitted (pkg/allocated; the least privilege:
// a file on the host, no API permission to read pods), keeping the pods
// that still run (pkg/podcgroups). Only a shrinking allocatable can reject
// a pod that was admitted: when no resource of the prediction's allocatable
// is below the Node's, nothing is read.
func (m *Remedier) readmission(f *kubeletwatch.Facts, st nodepatch.State) readmission {
	if st.Prediction == nil || st.Prediction.Allocatable == nil || st.Node == nil {
		return readmission{}
	}
	shrinks := shrinking(st.Prediction.Allocatable, st.Node.Status.Allocatable)
	if len(shrinks) == 0 {
		return readmission{}
	}
	cfg := f.Kubelet.Config
	pc := podcgroups.Config{CgroupRoot: cfg.CgroupRoot, CgroupDriver: cfg.CgroupDriver, CgroupsPerQOS: cfg.CgroupsPerQOS == nil || *cfg.CgroupsPerQOS}
	running, rerr := podcgroups.Running(m.o.CgroupFS, pc)
	cp, err := allocated.Read(f.StateDir, f.Release, cfg.FeatureGates)
	switch {
	case errors.Is(err, allocated.ErrCorrupt):
		return readmission{refuse: err}
	case errors.Is(err, allocated.ErrNotExist):
		// With InPlacePodVerticalScaling on (locked on from 1.35) the
		// kubelet writes the file when it admits a pod: none admitted,
		// none to reject.
		return readmission{}
	case err != nil && rerr == nil && len(running) == 0:
		return readmission{} // no pod runs: none to reject
	case err != nil:
		return readmission{cannot: fmt.Sprintf("allocatable shrinks (%s) and the kubelet's checkpoint of the pods it admitted cannot be read (%v), so hotplugd cannot tell whether the restart would reject running pods",
			strings.Join(shrinks, ", "), err)}
	}
	pods := cp.Pods
	if rerr == nil {
		pods, _ = allocated.KeepRunning(pods, running)
	} else {
		m.log.Info("which pods still run cannot be told from their cgroups; counting every pod of the checkpoint", zap.Error(rerr))
	}
	res := allocated.Shortfall(st.Prediction.Allocatable, pods)
	if res.Fits() {
		return readmission{}
	}
	names := kubeletstate.PodNames{}
	for uid, p := range podnames.Resolve(f.Kubelet.PodLogsDir(), res.UIDs()) {
		names[uid] = p.Namespace + "/" + p.Name
	}
	return readmission{short: &res, names: names}
}

// shrinking names the resources whose predicted allocatable is below the
// Node's ("cpu 2 -> 1"), in name order.
func shrinking(predicted, reported v1.ResourceList) []string {
	var out []string
	for name, p := range predicted {
		if r, ok := reported[name]; ok && p.Cmp(r) < 0 {
			out = append(out, fmt.Sprintf("%s %s -> %s", name, r.String(), p.String()))
		}
	}
	slices.Sort(out)
	return out
}

// wouldReject: the restart's re-admission would reject running pods; the
// kubelet is left running as it is, and the pods to drain are named.
func (m *Remedier) wouldReject(a Attempt, r readmission, next string) Attempt {
	a.Outcome = OutcomeNeedsPerson
	a.Err = errors.New("a restart would reject running pods: " + r.short.String())
	a.Reason, a.Warning = nodepatch.ReasonNeedsDrain, true
	a.Message = fmt.Sprintf("the kubelet was not restarted: its new allocatable is below the requests of the pods that run, and a restarted kubelet admits them again and rejects those that no longer fit: %s; what to do: drain the pods named (or move their load) and restart the kubelet, or let hotplugd do it when the machine or the kubelet's configuration next changes (not before %s)",
		r.short.Describe(r.names), next)
	return a
}
