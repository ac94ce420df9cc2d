package cpumgr

import (
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"

	"k8s.io/utils/cpuset"
	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/internal/checksum"
	"github.com/hotplugd/hotplugd/pkg/cpumgr/internal/state"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

// Format is a cpu_manager_state layout.
type Format string

// The layouts kubelets write.
const (
	// FormatV1: entries keyed by container ID (kubelets before 1.18).
	FormatV1 Format = "V1"
	// FormatV2: entries keyed by pod UID, then container name.
	FormatV2 Format = "V2"
	// FormatV3: V2 plus podEntries (1.36 with PodLevelResourceManagers).
	FormatV3 Format = "V3"
	// FormatV4: the V2 fields for older kubelets, plus the V3 payload with
	// baselines as a JSON string in "data", with "dataChecksum" (kubelet
	// 1.37, whatever its gates).
	FormatV4 Format = "V4"
)

// State is a cpu_manager_state checkpoint.
type State struct {
	// Format is the layout the file was read as, and the one Marshal
	// writes: FormatV4, FormatV3 or FormatV2 (a V1 file without
	// assignments, the only V1 file hotplugd reads, is written back as V2,
	// as the kubelet does).
	Format     Format
	PolicyName string
	// DefaultCPUSet is the shared pool.
	DefaultCPUSet cpuset.CPUSet
	// Entries are the exclusive assignments: pod UID -> container -> CPUs.
	Entries map[string]map[string]cpuset.CPUSet
	// PodEntries are the pod-level assignments (V3): pod UID -> CPUs.
	PodEntries map[string]cpuset.CPUSet
	// Baselines are the containers' admission-time CPUs of a V4 payload
	// (InPlacePodVerticalScalingExclusiveCPUs); only a 1.37 kubelet with
	// that gate reads and writes them.
	Baselines map[string]map[string]cpuset.CPUSet
	// Checksum is the checksum as read; Marshal computes its own.
	Checksum uint64

	// loadErr is what each kubelet loader says about the file read; ""
	// when it loads.
	loadErr [numReaders]string
	// baselineErr is a 1.37 kubelet's refusal of an unparsable baseline,
	// with the gate that reads them; "" when they parse.
	baselineErr string
}

// reader is one kubelet's checkpoint loader: a release's load chain under
// one setting of the PodLevelResourceManagers gate it depends on.
type reader int

const (
	readV2Legacy reader = iota // 1.34, 1.35: V1, else V2 (checksum 0 or under the legacy name)
	readV2                     // 1.36 without the gate: V2 (also under its own name), else V1
	readV3                     // 1.36 with the gate: V3, else V2, else V1
	readV4Off                  // 1.37 without the gate: V4, else V3, else V2
	readV4On                   // 1.37 with the gate
	numReaders
)

// reader is the loader of the configured kubelet.
func (c Config) reader() reader {
	switch c.release().CPUState {
	case kubeletversion.CPUStateV2:
		return readV2Legacy
	case kubeletversion.CPUStateV4:
		if c.PodLevelResourceManagers {
			return readV4On
		}
		return readV4Off
	}
	if c.PodLevelResourceManagers {
		return readV3
	}
	return readV2
}

// writes is the layout the configured kubelet writes.
func (c Config) writes() Format {
	switch c.reader() {
	case readV3:
		return FormatV3
	case readV4Off, readV4On:
		return FormatV4
	}
	return FormatV2
}

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := *s
	c.Entries = make(map[string]map[string]cpuset.CPUSet, len(s.Entries))
	for pod, containers := range s.Entries {
		c.Entries[pod] = maps.Clone(containers)
		if c.Entries[pod] == nil {
			c.Entries[pod] = map[string]cpuset.CPUSet{}
		}
	}
	c.PodEntries = maps.Clone(s.PodEntries)
	if s.Baselines != nil {
		c.Baselines = make(map[string]map[string]cpuset.CPUSet, len(s.Baselines))
		for pod, containers := range s.Baselines {
			c.Baselines[pod] = maps.Clone(containers)
		}
	}
	return &c
}

// equalContent reports whether a and b hold the same policy, sets and
// assignments.
func equalContent(a, b *State) bool {
	if a.PolicyName != b.PolicyName || !a.DefaultCPUSet.Equals(b.DefaultCPUSet) || len(a.Entries) != len(b.Entries) || len(a.PodEntries) != len(b.PodEntries) {
		return false
	}
	for pod, ac := range a.Entries {
		bc, ok := b.Entries[pod]
		if !ok || !maps.EqualFunc(ac, bc, cpuset.CPUSet.Equals) {
			return false
		}
	}
	return maps.EqualFunc(a.PodEntries, b.PodEntries, cpuset.CPUSet.Equals)
}

// Parse reads a cpu_manager_state checkpoint the way each kubelet release
// hotplugd knows reads it, under both settings of the
// PodLevelResourceManagers feature gate:
//
//   - 1.34, 1.35: V1, else V2;
//   - 1.36, gate off: V2, else V1; gate on: V3, else V2 (migrated to V3),
//     else V1;
//   - 1.37: V4 (the data payload, verified by dataChecksum alone; a V4 file
//     that does not verify is refused, never read as V3), else V3, else V2
//     (migrated to V4 in memory); never V1.
//
// Each step is json.Unmarshal (keys matched case-insensitively, unknown keys
// ignored) and the kubelet's checksum check (FNV-32a of the spew dump of the
// struct with checksum 0; V2 and V1 accept a checksum of 0 unchecked and hash
// under the legacy type name state.CPUManagerCheckpoint, V2 with the gate
// off also under its own name; V3 accepts no 0 and, in 1.37, also its own
// name CPUManagerCheckpointV3). A file that loads under some release is
// returned, with what each of the others says about it for Validate. For a
// V4 file the State is its payload (a kubelet before 1.37 reads the V2 fields
// beside it, which 1.37 writes from the same payload).
//
// A file no kubelet loads is refused with a *LoadError in the kubelet's
// words (KubeletFor gives each release's). Refused with a FormatError, where
// hotplugd cannot judge: V1 files with assignments (keyed by container ID,
// which only a kubelet before 1.37 can map to pods), and JSON that is not an
// object with a policyName, data or dataChecksum key.
func Parse(b []byte) (*State, error) {
	s, err := parse(b)
	if err != nil {
		return nil, fmt.Errorf("cpumgr: %w", err)
	}
	return s, nil
}

func parse(b []byte) (*State, error) {
	podEntries, hasData, err := sniff(b)
	if err != nil {
		return nil, err
	}
	l := &loader{b: b, podEntriesKey: podEntries}
	var states [numReaders]*State
	var errs [numReaders]error
	states[readV3], errs[readV3] = l.load(true)
	states[readV2], errs[readV2] = l.load(false)
	states[readV2Legacy], errs[readV2Legacy] = l.loadLegacy()
	states[readV4Off], errs[readV4Off] = l.load137(false)
	states[readV4On], errs[readV4On] = l.load137(true)

	order := []reader{readV3, readV2, readV2Legacy, readV4On, readV4Off}
	if hasData {
		order = []reader{readV4On, readV4Off, readV3, readV2, readV2Legacy}
	}
	var s *State
	for _, r := range order {
		if errs[r] == nil {
			s = states[r]
			break
		}
	}
	if s == nil {
		// The chains before 1.37 end with the same V1 attempt, so their
		// errors agree; where that attempt cannot judge (V1 with
		// assignments), hotplugd cannot either.
		var fe *FormatError
		if errors.As(errs[readV2], &fe) {
			return nil, fe
		}
		le := &LoadError{Kubelet: kubeletText(errs[readV2]), err: errors.Unwrap(errs[readV2])}
		for r := range numReaders {
			le.byReader[r] = kubeletText(errs[r])
		}
		return nil, le
	}
	for r := range numReaders {
		if errs[r] != nil {
			s.loadErr[r] = kubeletText(errs[r])
		}
	}
	return s, nil
}

// sniff refuses valid JSON that is not a checkpoint object. Invalid JSON is
// left to the chains, which report it as the kubelet does. It also tells
// whether the object has a podEntries key, and a data or dataChecksum key
// (V4).
func sniff(b []byte) (podEntries, data bool, err error) {
	var top map[string]json.RawMessage
	if err := json.Unmarshal(b, &top); err != nil {
		var typeErr *json.UnmarshalTypeError
		if errors.As(err, &typeErr) {
			return false, false, &FormatError{Reason: "the file is JSON but not an object"}
		}
		return false, false, nil
	}
	hasPolicy := false
	for k := range top {
		// encoding/json matches keys case-insensitively; so does this.
		switch {
		case strings.EqualFold(k, "data"), strings.EqualFold(k, "dataChecksum"):
			data = true
		case strings.EqualFold(k, "policyName"):
			hasPolicy = true
		case strings.EqualFold(k, "podEntries"):
			podEntries = true
		}
	}
	if !hasPolicy && !data {
		return false, false, &FormatError{Reason: "no policyName"}
	}
	return podEntries, data, nil
}

// kubeletText is the kubelet's wording of a load error.
func kubeletText(err error) string {
	if le, ok := err.(*LoadError); ok {
		return le.Kubelet
	}
	return err.Error()
}

// corrupted is the kubelet's CorruptCheckpointError text.
const corrupted = "checkpoint is corrupted"

// loader runs the kubelet's load chain over one file, sharing the work the
// two gate settings have in common.
type loader struct {
	b []byte
	// podEntriesKey says the object has a podEntries key.
	podEntriesKey bool

	v2Done bool
	v2     *state.CPUManagerCheckpointV2
	v2Err  error
	// v2Std and v2Legacy are the checksums under the V2 type name and under
	// the legacy name.
	v2Std, v2Legacy uint64

	v2State    *State
	v2StateErr error

	v1Done  bool
	v1State *State
	v1Err   error
}

// load is the kubelet's restoreState load step with the gate set as given.
func (l *loader) load(gateOn bool) (*State, error) {
	// With the gate the kubelet tries V3 first. Without podEntries in the
	// file a V3 load holds what the V2 fallback holds, so when the V2
	// fallback verifies the V3 attempt (a spew dump) is skipped: it could
	// only differ by an FNV collision of two different dumps.
	if gateOn && (l.podEntriesKey || !l.v2Verifies(true)) {
		cp := &state.CPUManagerCheckpoint{
			Entries:    map[string]map[string]string{},
			PodEntries: state.PodCPUAssignments{},
		}
		if err := json.Unmarshal(l.b, cp); err == nil {
			ck := cp.Checksum
			cp.Checksum = 0
			// V3 has no "0 is unchecked" rule: a zero checksum fails here
			// and the file is tried as V2.
			if hashV3(cp) == uint64(ck) {
				return fromV3(cp, uint64(ck))
			}
		}
	}
	if l.v2Verifies(gateOn) {
		if l.v2State == nil && l.v2StateErr == nil {
			l.v2State, l.v2StateErr = fromV2(l.v2)
		}
		if l.v2StateErr != nil || !gateOn {
			return l.v2State, l.v2StateErr
		}
		// The kubelet migrates a V2 checkpoint to V3 in memory: the same
		// assignments, no pod-level ones.
		s := *l.v2State
		s.PodEntries = map[string]cpuset.CPUSet{}
		return &s, nil
	}
	return l.loadV1()
}

// v2Verifies says whether the file loads as V2: it unmarshals and its
// checksum is 0, the legacy-name hash, or, without the gate, the V2-name
// hash.
func (l *loader) v2Verifies(gateOn bool) bool {
	if l.loadV2() != nil {
		return false
	}
	ck := uint64(l.v2.Checksum)
	return ck == 0 || (!gateOn && l.v2Std == ck) || l.v2Legacy == ck
}

func (l *loader) loadV2() error {
	if l.v2Done {
		return l.v2Err
	}
	l.v2Done = true
	cp := &state.CPUManagerCheckpointV2{Entries: map[string]map[string]string{}}
	if l.v2Err = json.Unmarshal(l.b, cp); l.v2Err != nil {
		return l.v2Err
	}
	l.v2 = cp
	if cp.Checksum != 0 {
		ck := cp.Checksum
		cp.Checksum = 0
		d := dump.ForHash(cp)
		l.v2Std = checksum.Of(d)
		l.v2Legacy = checksum.Of(strings.Replace(d, "CPUManagerCheckpointV2", "CPUManagerCheckpoint", 1))
		cp.Checksum = ck
	}
	return nil
}

func (l *loader) loadV1() (*State, error) {
	if l.v1Done {
		return l.v1State, l.v1Err
	}
	l.v1Done = true
	l.v1State, l.v1Err = l.v1()
	return l.v1State, l.v1Err
}

func (l *loader) v1() (*State, error) {
	cp := &state.CPUManagerCheckpointV1{Entries: map[string]string{}}
	if err := json.Unmarshal(l.b, cp); err != nil {
		return nil, &LoadError{Kubelet: err.Error(), err: err}
	}
	if ck := cp.Checksum; ck != 0 {
		cp.Checksum = 0
		d := strings.Replace(dump.ForHash(cp), "CPUManagerCheckpointV1", "CPUManagerCheckpoint", 1)
		cp.Checksum = ck
		if checksum.Of(d) != uint64(ck) {
			return nil, &LoadError{Kubelet: corrupted}
		}
	}
	if len(cp.Entries) > 0 {
		return nil, &FormatError{Format: FormatV1, Reason: "its assignments are keyed by container ID (a kubelet older than 1.18 wrote it); the kubelet maps them to pods from the running containers when it starts, hotplugd cannot: let the kubelet migrate the file first"}
	}
	s, err := fromV2(&state.CPUManagerCheckpointV2{PolicyName: cp.PolicyName, DefaultCPUSet: cp.DefaultCPUSet, Checksum: cp.Checksum})
	if err != nil {
		return nil, err
	}
	s.Format = FormatV1
	return s, nil
}

// fromV2 parses the CPU lists of a loaded V2 checkpoint, with the kubelet's
// messages.
func fromV2(cp *state.CPUManagerCheckpointV2) (*State, error) {
	s := &State{Format: FormatV2, PolicyName: cp.PolicyName, Checksum: uint64(cp.Checksum)}
	var err error
	if s.DefaultCPUSet, s.Entries, err = parseSets(cp.DefaultCPUSet, cp.Entries); err != nil {
		return nil, err
	}
	return s, nil
}

func fromV3(cp *state.CPUManagerCheckpoint, ck uint64) (*State, error) {
	s := &State{Format: FormatV3, PolicyName: cp.PolicyName, Checksum: ck}
	var err error
	if s.DefaultCPUSet, s.Entries, err = parseSets(cp.DefaultCPUSet, cp.Entries); err != nil {
		return nil, err
	}
	s.PodEntries = make(map[string]cpuset.CPUSet, len(cp.PodEntries))
	for pod, e := range cp.PodEntries {
		s.PodEntries[pod] = e.CPUSet
	}
	return s, nil
}

func parseSets(def string, entries map[string]map[string]string) (cpuset.CPUSet, map[string]map[string]cpuset.CPUSet, error) {
	d, err := cpuset.Parse(def)
	if err != nil {
		return d, nil, &LoadError{Kubelet: fmt.Sprintf("could not parse default cpu set %q: %v", def, err), err: err}
	}
	out := make(map[string]map[string]cpuset.CPUSet, len(entries))
	for pod, containers := range entries {
		out[pod] = make(map[string]cpuset.CPUSet, len(containers))
		for container, list := range containers {
			set, err := cpuset.Parse(list)
			if err != nil {
				return d, nil, &LoadError{Kubelet: fmt.Sprintf("could not parse cpuset %q for container %q in pod %q: %v", list, container, pod, err), err: err}
			}
			out[pod][container] = set
		}
	}
	return d, out, nil
}

// hashV3 is the kubelet's checksum.New of a V3 checkpoint (Checksum 0).
func hashV3(cp *state.CPUManagerCheckpoint) uint64 { return checksum.Of(dump.ForHash(cp)) }

// Marshal returns the bytes the kubelet's checkpoint code writes for s: the
// layout of s.Format (V4, V3, or V2 for FormatV2, FormatV1 and ""), keys in
// the kubelet's order, entries and podEntries omitted when empty, canonical
// CPU lists, and the checksums (V2, and the V2 fields beside a V4 payload,
// under the legacy type name, as kubelets write it; V4's dataChecksum over
// its data). Any other Format is a *FormatError (ErrUnsupportedFormat).
func (s *State) Marshal() ([]byte, error) {
	entries := make(map[string]map[string]string, len(s.Entries))
	for _, pod := range slices.Sorted(maps.Keys(s.Entries)) {
		containers := s.Entries[pod]
		entries[pod] = make(map[string]string, len(containers))
		for container, set := range containers {
			entries[pod][container] = set.String()
		}
	}
	var out any
	switch s.Format {
	case FormatV3:
		cp := &state.CPUManagerCheckpoint{
			PolicyName:    s.PolicyName,
			DefaultCPUSet: s.DefaultCPUSet.String(),
			Entries:       entries,
			PodEntries:    make(state.PodCPUAssignments, len(s.PodEntries)),
		}
		for pod, set := range s.PodEntries {
			cp.PodEntries[pod] = state.PodEntry{CPUSet: set}
		}
		cp.Checksum = checksum.Checksum(hashV3(cp))
		out = cp
	case FormatV2, FormatV1, "":
		cp := &state.CPUManagerCheckpointV2{
			PolicyName:    s.PolicyName,
			DefaultCPUSet: s.DefaultCPUSet.String(),
			Entries:       entries,
		}
		cp.Checksum = checksum.Checksum(checksum.Of(strings.Replace(dump.ForHash(cp), "CPUManagerCheckpointV2", "CPUManagerCheckpoint", 1)))
		out = cp
	case FormatV4:
		return s.marshalV4(entries)
	default:
		return nil, &FormatError{Format: s.Format, Reason: "hotplugd writes V2, V3 and V4 only"}
	}
	b, err := json.Marshal(out)
	if err != nil {
		return nil, fmt.Errorf("cpumgr: marshal: %w", err)
	}
	return b, nil
}
