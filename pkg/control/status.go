package control

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/pkg/journal"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// Status is what `hotplugd status` shows: the loop's last decision and
// what it was made from. NewStatus makes it from a decision's inputs and
// plan; it is a value, printed as JSON or text.
type Status struct {
	// Time is when the decision was made.
	Time time.Time `json:"time"`
	// Mode is --remedy.
	Mode string `json:"mode"`
	// Machine is what a kubelet started now would report.
	Machine *MachineStatus `json:"machine,omitempty"`
	// Kubelet is the kubelet as found (nil: none).
	Kubelet *KubeletStatus `json:"kubelet,omitempty"`
	// Node is the Node as last seen (nil: not registered, or not seen).
	Node *NodeStatus `json:"node,omitempty"`
	// Drift is the difference between the Node and the machine, "" when
	// none (or when the Node is not known).
	Drift string `json:"drift,omitempty"`
	// Next is what the loop does next, and why.
	Next Next `json:"next"`
	// Underway is a kubelet restart in progress.
	Underway *journal.Underway `json:"underway,omitempty"`
	// Attempts are the remedy's last attempts, newest last.
	Attempts []journal.Entry `json:"attempts,omitempty"`
	// Retry is the last retry taken from the Node.
	Retry *journal.Retry `json:"retry,omitempty"`
}

// MachineStatus is the prediction.
type MachineStatus struct {
	Capacity    string `json:"capacity"`
	Allocatable string `json:"allocatable,omitempty"`
	// AllocatableError says why allocatable is not predicted.
	AllocatableError string `json:"allocatableError,omitempty"`
	// Limit says why the prediction is capacity only.
	Limit string `json:"limit,omitempty"`
}

// KubeletStatus is the kubelet found.
type KubeletStatus struct {
	PID         int      `json:"pid,omitempty"`
	Version     string   `json:"version,omitempty"`
	VersionFrom string   `json:"versionFrom,omitempty"`
	Config      string   `json:"config,omitempty"`
	ConfigDir   string   `json:"configDir,omitempty"`
	RootDir     string   `json:"rootDir,omitempty"`
	Started     string   `json:"started,omitempty"`
	Limits      []string `json:"limits,omitempty"`
	Error       string   `json:"error,omitempty"`
}

// NodeStatus is the Node's half.
type NodeStatus struct {
	Capacity    string            `json:"capacity"`
	Allocatable string            `json:"allocatable"`
	Condition   *v1.NodeCondition `json:"condition,omitempty"`
	Held        string            `json:"held,omitempty"`
	Pending     bool              `json:"pending,omitempty"`
	Events      []nodepatch.Event `json:"events,omitempty"`
}

// Next is the plan's remedy and wake.
type Next struct {
	Action string    `json:"action"`
	Why    string    `json:"why"`
	At     time.Time `json:"at,omitzero"`
	Wake   time.Time `json:"wake,omitzero"`
}

// statusAttempts is how many attempts a Status carries.
const statusAttempts = 5

// NewStatus is the Status of a decision.
func NewStatus(in Inputs, p Plan) Status {
	s := Status{
		Time: in.Now, Mode: string(in.Mode), Underway: in.Journal.Underway, Retry: in.Journal.Retry,
		Next: Next{Action: string(p.Remedy.Action), Why: p.Remedy.Why, At: p.Remedy.At, Wake: p.Wake},
	}
	if a := in.Journal.Attempts; len(a) > 0 {
		s.Attempts = append([]journal.Entry(nil), a[max(0, len(a)-statusAttempts):]...)
	}
	if pr := p.Prediction; pr != nil {
		s.Machine = &MachineStatus{Capacity: nodepatch.FormatResources(pr.Capacity), AllocatableError: p.PredictErr, Limit: pr.Limit}
		if pr.Allocatable != nil {
			s.Machine.Allocatable = nodepatch.FormatResources(pr.Allocatable)
		}
	}
	if f := in.Kubelet; f != nil && (f.Kubelet != nil || f.Err != nil || len(f.Limits) > 0) {
		k := &KubeletStatus{VersionFrom: f.VersionFrom, RootDir: f.StateDir, Limits: f.Limits}
		if !f.Version.IsZero() {
			k.Version = f.Version.String()
		}
		if f.Err != nil {
			k.Error = f.Err.Error()
		}
		if !f.Started.IsZero() {
			k.Started = f.Started.UTC().Format(time.RFC3339)
		}
		if kk := f.Kubelet; kk != nil {
			k.PID, k.Config, k.ConfigDir = kk.PID, kk.ConfigPath, kk.ConfigDir
			if k.RootDir == "" {
				k.RootDir = kk.RootDir
			}
		}
		s.Kubelet = k
	}
	if n := in.Node; n != nil && p.NodeKnown {
		s.Node = &NodeStatus{
			Capacity: nodepatch.FormatResources(n.Status.Capacity), Allocatable: nodepatch.FormatResources(n.Status.Allocatable),
			Condition: nodepatch.FindCondition(n), Held: p.Node.Held, Pending: p.Node.Patch != nil, Events: p.Node.Events,
		}
		if sig := p.Node.Drift.Significant(); len(sig) > 0 {
			s.Drift = sig.String()
		}
	}
	return s
}

// WriteText prints s for people.
func (s Status) WriteText(w io.Writer) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, v string) {
		if v != "" {
			fmt.Fprintf(tw, "%s\t%s\n", k, v)
		}
	}
	line("Decided", s.Time.UTC().Format(time.RFC3339))
	line("Remedy", s.Mode)
	if m := s.Machine; m != nil {
		line("Machine", "capacity "+m.Capacity)
		if m.Allocatable != "" {
			line("", "allocatable "+m.Allocatable)
		}
		line("", m.AllocatableError)
		line("", m.Limit)
	} else {
		line("Machine", "not read yet")
	}
	if k := s.Kubelet; k != nil {
		v := k.Version
		if k.VersionFrom != "" {
			v += " (from " + k.VersionFrom + ")"
		}
		proc := "no process found"
		if k.PID > 0 {
			proc = fmt.Sprintf("pid %d", k.PID)
		}
		line("Kubelet", strings.TrimSuffix(proc+", "+v, ", "))
		line("", configText(k))
		line("", rootText(k.RootDir))
		line("", k.Error)
		for _, l := range k.Limits {
			line("", l)
		}
	} else {
		line("Kubelet", "none found")
	}
	if n := s.Node; n != nil {
		line("Node", "capacity "+n.Capacity)
		line("", "allocatable "+n.Allocatable)
		if c := n.Condition; c != nil {
			line("", fmt.Sprintf("%s=%s (%s) since %s, heartbeat %s", c.Type, c.Status, c.Reason,
				c.LastTransitionTime.UTC().Format(time.RFC3339), c.LastHeartbeatTime.UTC().Format(time.RFC3339)))
		}
		if n.Held != "" {
			line("", "writes held: "+n.Held)
		} else if n.Pending {
			line("", "a write is due")
		}
	} else {
		line("Node", "not seen yet")
	}
	if s.Drift != "" {
		line("Drift", s.Drift+" (reported -> this machine)")
	} else if s.Node != nil {
		line("Drift", "none: the kubelet reports this machine")
	}
	next := s.Next.Action + ": " + s.Next.Why
	if !s.Next.At.IsZero() {
		next += " (until " + s.Next.At.UTC().Format(time.RFC3339) + ")"
	}
	line("Next", next)
	if u := s.Underway; u != nil {
		line("Underway", fmt.Sprintf("%s since %s: %s", u.Phase, u.Start.UTC().Format(time.RFC3339), u.Drift))
	}
	if r := s.Retry; r != nil {
		line("Retry", fmt.Sprintf("%q taken at %s: attempts before it no longer stand", r.Token, r.At.UTC().Format(time.RFC3339)))
	}
	for i, a := range s.Attempts {
		k := ""
		if i == 0 {
			k = "Attempts"
		}
		text := fmt.Sprintf("%s %s", a.Start.UTC().Format(time.RFC3339), a.Outcome)
		if a.Why != "" {
			text += ": " + a.Why
		}
		line(k, text)
	}
	return tw.Flush()
}

func configText(k *KubeletStatus) string {
	switch {
	case k.Config != "" && k.ConfigDir != "":
		return "config " + k.Config + ", drop-ins " + k.ConfigDir
	case k.Config != "":
		return "config " + k.Config
	}
	return ""
}

func rootText(dir string) string {
	if dir == "" {
		return ""
	}
	return "root dir " + dir
}
