package cpumgr

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/internal/kubeletstate"
)

func newState(format Format, policy, def string, entries map[string]map[string]string, podEntries map[string]string) *State {
	s := &State{Format: format, PolicyName: policy, DefaultCPUSet: set(def), Entries: map[string]map[string]cpuset.CPUSet{}}
	for pod, containers := range entries {
		s.Entries[pod] = map[string]cpuset.CPUSet{}
		for c, list := range containers {
			s.Entries[pod][c] = set(list)
		}
	}
	if podEntries != nil {
		s.PodEntries = map[string]cpuset.CPUSet{}
		for pod, list := range podEntries {
			s.PodEntries[pod] = set(list)
		}
	}
	return s
}

// planSummary is what a plan test compares.
type planSummary struct {
	Changed, Dropped bool
	Invalid          Rule
	Default          string // of New; "-" without New
	Added, Removed   string
	Kept             []string
	NeedsDrain       []string
}

func summarize(p *Plan) planSummary {
	sum := planSummary{Changed: p.Changed, Dropped: p.Dropped, Default: "-", Added: p.Added.String(), Removed: p.Removed.String()}
	if p.Invalid != nil {
		sum.Invalid = p.Invalid.Rule
	}
	if p.New != nil {
		sum.Default = p.New.DefaultCPUSet.String()
	}
	for _, a := range p.Kept {
		sum.Kept = append(sum.Kept, a.String())
	}
	for _, d := range p.NeedsDrain {
		sum.NeedsDrain = append(sum.NeedsDrain, d.Assignment.String()+": "+d.Reason)
	}
	return sum
}

func TestPlanRebuild(t *testing.T) {
	strict := func(kc *kubeletv1beta1.KubeletConfiguration) {
		kc.CPUManagerPolicyOptions = map[string]string{"strict-cpu-reservation": "true"}
	}
	podLevel := func(kc *kubeletv1beta1.KubeletConfiguration) {
		kc.FeatureGates = map[string]bool{"PodLevelResourceManagers": true}
	}
	twoPods := map[string]map[string]string{podA: {"app": "2-3"}, podB: {"db": "4-5"}}
	tests := []struct {
		name      string
		state     *State
		machine   fixturegen.Machine
		kc        *kubeletv1beta1.KubeletConfiguration
		allowDrop bool
		want      planSummary
		wantErr   error
		// wantFormat is New's format.
		wantFormat Format
	}{
		{
			name:    "CPUs added 4 to 8",
			state:   newState(FormatV2, "static", "0-1", map[string]map[string]string{podA: {"app": "2-3"}}, nil),
			machine: machine(8, 1), kc: kubelet("1"), wantFormat: FormatV2,
			want: planSummary{Changed: true, Invalid: RuleCPUs, Default: "0-1,4-7", Added: "4-7",
				Kept: []string{"pod " + podA + " container app 2-3"}},
		},
		{
			name:    "CPUs removed 8 to 4 without pins",
			state:   newState(FormatV2, "static", "0-7", nil, nil),
			machine: machine(8, 1, 4, 5, 6, 7), kc: kubelet("1"), wantFormat: FormatV2,
			want: planSummary{Changed: true, Invalid: RuleCPUs, Default: "0-3", Removed: "4-7"},
		},
		{
			name:    "CPUs removed 8 to 4 with a pinned container",
			state:   newState(FormatV2, "static", "0-1,6-7", twoPods, nil),
			machine: machine(8, 1, 4, 5, 6, 7), kc: kubelet("1"),
			wantErr: ErrNeedsDrain,
			want: planSummary{Invalid: RuleCPUs, Default: "-", Removed: "4-7",
				Kept:       []string{"pod " + podA + " container app 2-3"},
				NeedsDrain: []string{"pod " + podB + " container db 4-5: CPUs 4-5 are offline"}},
		},
		{
			name:    "CPUs removed 8 to 4 with a pinned container, drop allowed",
			state:   newState(FormatV2, "static", "0-1,6-7", twoPods, nil),
			machine: machine(8, 1, 4, 5, 6, 7), kc: kubelet("1"), allowDrop: true, wantFormat: FormatV2,
			want: planSummary{Changed: true, Dropped: true, Invalid: RuleCPUs, Default: "0-1", Removed: "4-7",
				Kept:       []string{"pod " + podA + " container app 2-3"},
				NeedsDrain: []string{"pod " + podB + " container db 4-5: CPUs 4-5 are offline"}},
		},
		{
			name:    "SMT with 2 reserved CPUs: cores 4-7 added",
			state:   newState(FormatV2, "static", "0-1,8-9", map[string]map[string]string{podA: {"app": "2-3,10-11"}}, nil),
			machine: machine(8, 2), kc: kubelet("2"), wantFormat: FormatV2,
			want: planSummary{Changed: true, Invalid: RuleCPUs, Default: "0-1,4-9,12-15", Added: "4-7,12-15",
				Kept: []string{"pod " + podA + " container app 2-3,10-11"}},
		},
		{
			name:    "SMT with reserved CPUs: c18 already valid",
			state:   newState(FormatV2, "static", "0-1,4-5", map[string]map[string]string{podA: {"app": "2-3,6-7"}}, nil),
			machine: machine(4, 2), kc: kubelet("2"), wantFormat: FormatV2,
			want: planSummary{Default: "0-1,4-5", Added: "", Removed: "",
				Kept: []string{"pod " + podA + " container app 2-3,6-7"}},
		},
		{
			// Reserved 1 -> 2: the kubelet takes CPU 0's sibling, 4.
			name:    "SMT: a raised reservation lands on a pinned CPU",
			state:   newState(FormatV2, "static", "0-3,6-7", map[string]map[string]string{podA: {"app": "4-5"}}, nil),
			machine: machine(4, 2), kc: kubelet("2"),
			wantErr: ErrNeedsDrain,
			want: planSummary{Invalid: RuleReserved, Default: "-",
				NeedsDrain: []string{"pod " + podA + " container app 4-5: CPUs 4 are reserved"}},
		},
		{
			name:    "strict reservation: CPUs added",
			state:   newState(FormatV2, "static", "1", map[string]map[string]string{podA: {"app": "2-3"}}, nil),
			machine: machine(8, 1), kc: kubelet("1", strict), wantFormat: FormatV2,
			want: planSummary{Changed: true, Invalid: RuleCPUs, Default: "1,4-7", Added: "4-7",
				Kept: []string{"pod " + podA + " container app 2-3"}},
		},
		{
			name:    "strict reservation turned on: the reserved CPU leaves the default set",
			state:   newState(FormatV2, "static", "0-1", map[string]map[string]string{podA: {"app": "2-3"}}, nil),
			machine: machine(4, 1), kc: kubelet("1", strict), wantFormat: FormatV2,
			want: planSummary{Changed: true, Invalid: RuleReserved, Default: "1",
				Kept: []string{"pod " + podA + " container app 2-3"}},
		},
		{
			name:    "an assignment overlapping the default set is kept, the default set shrinks",
			state:   newState(FormatV2, "static", "0-3,6-7", twoPods, nil),
			machine: machine(8, 1), kc: kubelet("1"), wantFormat: FormatV2,
			want: planSummary{Changed: true, Invalid: RuleOverlap, Default: "0-1,6-7",
				Kept: []string{"pod " + podA + " container app 2-3", "pod " + podB + " container db 4-5"}},
		},
		{
			name:    "pod-level: V3 kept and grown",
			state:   newState(FormatV3, "static", "0-1", map[string]map[string]string{podA: {"app": "2"}}, map[string]string{podA: "2-3"}),
			machine: machine(8, 1), kc: kubelet("1", podLevel), wantFormat: FormatV3,
			want: planSummary{Changed: true, Invalid: RuleCPUs, Default: "0-1,4-7", Added: "4-7",
				Kept: []string{"pod " + podA + " (pod-level) 2-3", "pod " + podA + " container app 2"}},
		},
		{
			name:    "pod-level: a pod that lost a CPU is drained whole",
			state:   newState(FormatV3, "static", "0-3", map[string]map[string]string{podA: {"app": "4"}}, map[string]string{podA: "4-7"}),
			machine: machine(8, 1, 7), kc: kubelet("1", podLevel), wantErr: ErrNeedsDrain,
			want: planSummary{Invalid: RuleCPUs, Default: "-", Removed: "7",
				NeedsDrain: []string{"pod " + podA + " (pod-level) 4-7: CPUs 7 are offline", "pod " + podA + " container app 4: its pod's pod-level CPUs 7 are offline"}},
		},
		{
			name:    "gate on: a V2 state is rewritten as V3",
			state:   newState(FormatV2, "static", "0-3", nil, nil),
			machine: machine(8, 1), kc: kubelet("1", podLevel), wantFormat: FormatV3,
			want: planSummary{Changed: true, Invalid: RuleCPUs, Default: "0-7", Added: "4-7"},
		},
		{
			name:    "valid: no change",
			state:   newState(FormatV2, "static", "0-1,6-7", twoPods, nil),
			machine: machine(8, 1), kc: kubelet("1"), wantFormat: FormatV2,
			want: planSummary{Default: "0-1,6-7",
				Kept: []string{"pod " + podA + " container app 2-3", "pod " + podB + " container db 4-5"}},
		},
		{
			name:    "empty default without assignments: the kubelet fills it",
			state:   newState(FormatV2, "static", "", nil, nil),
			machine: machine(8, 1), kc: kubelet("1"), wantFormat: FormatV2,
			want: planSummary{Default: "", Added: "0-7"},
		},
		{
			name:    "empty default with assignments: rebuilt",
			state:   newState(FormatV2, "static", "", map[string]map[string]string{podA: {"app": "2-3"}}, nil),
			machine: machine(4, 1), kc: kubelet("1"), wantFormat: FormatV2,
			want: planSummary{Changed: true, Invalid: RuleEmptyDefault, Default: "0-1", Added: "0-1",
				Kept: []string{"pod " + podA + " container app 2-3"}},
		},
		{
			name:    "policy changed",
			state:   newState(FormatV2, "none", "", nil, nil),
			machine: machine(8, 1), kc: kubelet("1"), wantErr: ErrPolicyChanged,
			want: planSummary{Invalid: RulePolicy, Default: "-"},
		},
		{
			name:    "none policy: nothing to check",
			state:   newState(FormatV2, "none", "", nil, nil),
			machine: machine(8, 1), kc: kubelet("", func(kc *kubeletv1beta1.KubeletConfiguration) { kc.CPUManagerPolicy = PolicyNone }),
			wantFormat: FormatV2,
			want:       planSummary{Default: ""},
		},
		{
			name:    "strict: every unreserved CPU pinned leaves the default set empty",
			state:   newState(FormatV2, "static", "1", map[string]map[string]string{podA: {"app": "2-3"}}, nil),
			machine: machine(4, 1, 1), kc: kubelet("1", strict), wantErr: ErrUnrepairable,
			want: planSummary{Invalid: RuleCPUs, Default: "-", Removed: "1",
				Kept: []string{"pod " + podA + " container app 2-3"}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			snap := snapshot(t, tt.machine)
			cfg, err := NewConfig(tt.kc, snap, "", rel136)
			if err != nil {
				t.Fatal(err)
			}
			cfg.AllowDrop = tt.allowDrop
			p, err := PlanRebuild(tt.state, snap, cfg)
			if !errors.Is(err, tt.wantErr) || (err != nil && tt.wantErr == nil) {
				t.Fatalf("PlanRebuild() error = %v, want %v", err, tt.wantErr)
			}
			if p == nil {
				t.Fatal("PlanRebuild() returned no plan")
			}
			if diff := cmp.Diff(tt.want, summarize(p)); diff != "" {
				t.Errorf("unexpected plan (-want +got):\n%s\n%v", diff, p)
			}
			if p.New == nil {
				return
			}
			if p.New.Format != tt.wantFormat {
				t.Errorf("New.Format = %s, want %s", p.New.Format, tt.wantFormat)
			}
			// What the plan writes is valid, and a plan over it changes nothing.
			b, err := p.New.Marshal()
			if err != nil {
				t.Fatal(err)
			}
			again, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse(Marshal(New)) error: %v", err)
			}
			if err := Validate(again, snap, cfg); err != nil {
				t.Errorf("the new state is invalid: %v", err)
			}
			p2, err := PlanRebuild(again, snap, cfg)
			if err != nil || p2.Changed {
				t.Errorf("a second plan: Changed=%v, error %v; want no change", p2 != nil && p2.Changed, err)
			}
		})
	}
}

func TestPlanString(t *testing.T) {
	snap := snapshot(t, machine(8, 1, 4, 5, 6, 7))
	cfg, err := NewConfig(kubelet("1"), snap, "/var/lib/kubelet/cpu_manager_state", rel136)
	if err != nil {
		t.Fatal(err)
	}
	s := newState(FormatV2, "static", "0-1,6-7", map[string]map[string]string{podA: {"app": "2-3"}, podB: {"db": "4-5"}}, nil)
	p, err := PlanRebuild(s, snap, cfg)
	if !errors.Is(err, ErrNeedsDrain) {
		t.Fatalf("PlanRebuild() error = %v", err)
	}
	want := `/var/lib/kubelet/cpu_manager_state: format V2, policy "static"
  the kubelet would refuse it: current set of available CPUs "0-3" doesn't match with CPUs in state "0-7"
  no change: it needs a person
  online CPUs: 0-3; reserved: 0
  CPUs removed: 4-7
  default set: 0-1,6-7
  keep: pod 6f1c2b9e-4a57-4e0b-9a55-1d2c3b4a5f60 container app 2-3
  needs drain: pod a3d4e5f6-7b8c-4d9e-8f01-23456789abcd container db 4-5: CPUs 4-5 are offline
  drain these pods, then plan again allowing the drop of their assignments
`
	if diff := cmp.Diff(want, p.String()); diff != "" {
		t.Errorf("unexpected String() (-want +got):\n%s", diff)
	}
	cfg.AllowDrop = true
	if p, err = PlanRebuild(s, snap, cfg); err != nil {
		t.Fatal(err)
	}
	for _, line := range []string{"  rewrite as V2\n", "  default set: 0-1,6-7 -> 0-1\n", "  drop: pod " + podB + " container db 4-5: CPUs 4-5 are offline\n"} {
		if !strings.Contains(p.String(), line) {
			t.Errorf("String() lacks %q:\n%s", line, p)
		}
	}
}

// TestPlanDescribe: the state file knows pods by UID only; Describe names
// those it is given (the drain and any other line of the same pod) and
// keeps the UID, and Drains lists what blocks the plan.
func TestPlanDescribe(t *testing.T) {
	snap := snapshot(t, machine(8, 1, 4, 5, 6, 7))
	cfg, err := NewConfig(kubelet("1"), snap, "/var/lib/kubelet/cpu_manager_state", rel136)
	if err != nil {
		t.Fatal(err)
	}
	s := newState(FormatV2, "static", "0-1,6-7", map[string]map[string]string{podA: {"app": "2-3"}, podB: {"db": "4-5"}}, nil)
	p, err := PlanRebuild(s, snap, cfg)
	if !errors.Is(err, ErrNeedsDrain) {
		t.Fatalf("PlanRebuild() error = %v", err)
	}
	wantDrains := []kubeletstate.Drain{{PodUID: podB, What: "container db 4-5", Reason: "CPUs 4-5 are offline"}}
	if diff := cmp.Diff(wantDrains, p.Drains()); diff != "" {
		t.Errorf("unexpected Drains() (-want +got):\n%s", diff)
	}
	got := p.Describe(kubeletstate.PodNames{podB: "databases/db-0.primary"})
	for _, line := range []string{
		"  keep: pod " + podA + " container app 2-3\n",
		"  needs drain: pod databases/db-0.primary (uid " + podB + ") container db 4-5: CPUs 4-5 are offline\n",
	} {
		if !strings.Contains(got, line) {
			t.Errorf("Describe() lacks %q:\n%s", line, got)
		}
	}
	if p.Describe(nil) != p.String() {
		t.Errorf("Describe(nil) is not String():\n%s", p.Describe(nil))
	}
	cfg.AllowDrop = true
	if p, err = PlanRebuild(s, snap, cfg); err != nil {
		t.Fatal(err)
	}
	if line := "  drop: pod databases/db-0.primary (uid " + podB + ") container db 4-5: CPUs 4-5 are offline\n"; !strings.Contains(p.Describe(kubeletstate.PodNames{podB: "databases/db-0.primary"}), line) {
		t.Errorf("Describe() lacks %q:\n%s", line, p.Describe(kubeletstate.PodNames{podB: "databases/db-0.primary"}))
	}
}

func TestApply(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu_manager_state")
	old := vector(t, "c01-static-4cpu-empty")
	if err := os.WriteFile(path, old, 0o600); err != nil {
		t.Fatal(err)
	}
	snap := snapshot(t, machine(8, 1))
	cfg, err := NewConfig(kubelet("1"), snap, path, rel136)
	if err != nil {
		t.Fatal(err)
	}
	s, err := ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	p, err := PlanRebuild(s, snap, cfg)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Date(2026, 11, 22, 2, 37, 0, 0, time.UTC)
	backup, err := Apply(p, now)
	if err != nil {
		t.Fatalf("Apply() error: %v", err)
	}
	if b, err := os.ReadFile(backup); err != nil || !bytes.Equal(b, old) {
		t.Errorf("backup = %q, %v; want the old file", b, err)
	}
	// The seed's file: what the kubelet writes for 8 CPUs.
	const want = `{"policyName":"static","defaultCpuSet":"0-7","checksum":14413152}`
	got, err := os.ReadFile(path)
	if err != nil || string(got) != want {
		t.Errorf("file = %s, %v; want %s", got, err, want)
	}
	if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
		t.Errorf("mode = %v, %v; want the old file's 0600", fi.Mode(), err)
	}

	// Valid now: a new plan changes nothing and Apply writes nothing.
	s, err = ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if p, err = PlanRebuild(s, snap, cfg); err != nil || p.Changed {
		t.Fatalf("second plan: Changed=%v, %v", p.Changed, err)
	}
	if backup, err := Apply(p, now.Add(time.Second)); err != nil || backup != "" {
		t.Errorf("Apply(unchanged) = %q, %v; want nothing done", backup, err)
	}

	// A blocked plan is not applied.
	if _, err := Apply(&Plan{Path: path, Changed: true}, now); err == nil {
		t.Error("Apply(plan without New) succeeded")
	}
}
