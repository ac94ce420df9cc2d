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
	state134 "github.com/hotplugd/hotplugd/pkg/cpumgr/internal/state134"
	"github.com/hotplugd/hotplugd/pkg/cpumgr/internal/state137"
)

// loadLegacy is the load chain of kubelets 1.34 and 1.35: V1 first (its
// checksum 0 or the hash under the legacy name), then V2 as they name it
// (CPUManagerCheckpoint; checksum 0 or its hash), whose error is the last
// word.
func (l *loader) loadLegacy() (*State, error) {
	s, err := l.loadV1()
	var fe *FormatError
	if err == nil || errors.As(err, &fe) {
		return s, err
	}
	cp := &state134.CPUManagerCheckpoint{Entries: map[string]map[string]string{}}
	if err := json.Unmarshal(l.b, cp); err != nil {
		return nil, &LoadError{Kubelet: err.Error(), err: err}
	}
	if ck := cp.Checksum; ck != 0 {
		cp.Checksum = 0
		if checksum.Of(dump.ForHash(cp)) != uint64(ck) {
			return nil, &LoadError{Kubelet: corrupted}
		}
		cp.Checksum = ck
	}
	s, err = fromV2(&state.CPUManagerCheckpointV2{PolicyName: cp.PolicyName, DefaultCPUSet: cp.DefaultCPUSet, Entries: cp.Entries, Checksum: cp.Checksum})
	if err != nil {
		return nil, err
	}
	return s, nil
}

// load137 is kubelet 1.37's loadAndMigrateCheckpointV4 and the parsing of
// restoreState, with the PodLevelResourceManagers gate as given (it decides
// how V2 checksums verify).
func (l *loader) load137(gateOn bool) (*State, error) {
	cp := state137.New()
	err := unmarshalV4(l.b, cp)
	if err == nil {
		if uint64(cp.DataChecksum) == checksum.Of(dumpString(cp.Data)) {
			return fromV4(cp)
		}
		err = &LoadError{Kubelet: corrupted}
	}
	if len(cp.Data) > 0 || cp.DataChecksum != 0 {
		return nil, &LoadError{Kubelet: "could not load v4 checkpoint: " + kubeletText(err), err: err}
	}
	// V3: its checksum under the name CPUManagerCheckpointV3, or under the
	// legacy name CPUManagerCheckpoint that 1.36 wrote; no 0.
	v3 := &state.CPUManagerCheckpoint{Entries: map[string]map[string]string{}, PodEntries: state.PodCPUAssignments{}}
	if json.Unmarshal(l.b, v3) == nil {
		ck := uint64(v3.Checksum)
		v3.Checksum = 0
		d := dump.ForHash(v3)
		if ck == checksum.Of(d) || ck == checksum.Of(strings.Replace(d, "CPUManagerCheckpoint", "CPUManagerCheckpointV3", 1)) {
			s, err := from137(FormatV3, v3.PolicyName, v3.DefaultCPUSet, v3.Entries)
			if err != nil {
				return nil, err
			}
			s.Checksum = ck
			s.PodEntries = make(map[string]cpuset.CPUSet, len(v3.PodEntries))
			for pod, e := range v3.PodEntries {
				s.PodEntries[pod] = e.CPUSet
			}
			return s, nil
		}
	}
	// V2, the oldest layout 1.37 reads: its error is the last word.
	if err := l.loadV2(); err != nil {
		return nil, &LoadError{Kubelet: err.Error(), err: err}
	}
	if !l.v2Verifies(gateOn) {
		return nil, &LoadError{Kubelet: corrupted}
	}
	s, err := from137(FormatV2, l.v2.PolicyName, l.v2.DefaultCPUSet, l.v2.Entries)
	if err != nil {
		return nil, err
	}
	s.Checksum = uint64(l.v2.Checksum)
	s.PodEntries = map[string]cpuset.CPUSet{}
	return s, nil
}

// unmarshalV4 is the V4 UnmarshalCheckpoint: the outer object, then its data
// string, with the kubelet's error wrapping.
func unmarshalV4(b []byte, cp *state137.CPUManagerCheckpoint) error {
	if err := json.Unmarshal(b, cp); err != nil {
		return fmt.Errorf("failed to deserialize cpu manager checkpoint: %w", err)
	}
	if err := json.Unmarshal([]byte(cp.Data), &cp.CheckpointData); err != nil {
		return fmt.Errorf("failed to deserialize cpu manager checkpoint data: %w", err)
	}
	return nil
}

func fromV4(cp *state137.CPUManagerCheckpoint) (*State, error) {
	d := cp.CheckpointData
	s, err := from137(FormatV4, d.PolicyName, d.DefaultCPUSet, d.Entries)
	if err != nil {
		return nil, err
	}
	s.Checksum = uint64(cp.Checksum)
	s.PodEntries = make(map[string]cpuset.CPUSet, len(d.PodEntries))
	for pod, e := range d.PodEntries {
		s.PodEntries[pod] = e.CPUSet
	}
	// Baselines are parsed by restoreState only with
	// InPlacePodVerticalScalingExclusiveCPUs; an unparsable one is a
	// refusal there and nothing without the gate (Validate decides).
	if len(d.Baselines) > 0 {
		s.Baselines = make(map[string]map[string]cpuset.CPUSet, len(d.Baselines))
		for _, pod := range slices.Sorted(maps.Keys(d.Baselines)) {
			s.Baselines[pod] = make(map[string]cpuset.CPUSet, len(d.Baselines[pod]))
			for _, container := range slices.Sorted(maps.Keys(d.Baselines[pod])) {
				b := d.Baselines[pod][container].Baseline
				set, err := cpuset.Parse(b)
				if err != nil {
					if s.baselineErr == "" {
						s.baselineErr = fmt.Sprintf("could not parse Baseline cpuset %q for container %q in pod %q: %v", b, container, pod, err)
					}
					continue
				}
				s.Baselines[pod][container] = set
			}
		}
	}
	return s, nil
}

// from137 parses the CPU lists as 1.37's restoreState does, with its words.
func from137(f Format, policy, def string, entries map[string]map[string]string) (*State, error) {
	s := &State{Format: f, PolicyName: policy}
	d, err := cpuset.Parse(def)
	if err != nil {
		return nil, &LoadError{Kubelet: fmt.Sprintf("could not parse default CPU set %q: %v", def, err), err: err}
	}
	s.DefaultCPUSet = d
	_, s.Entries, err = parseSets("", entries)
	if err != nil {
		return nil, err
	}
	return s, nil
}

// marshalV4 is kubelet 1.37's MarshalCheckpoint of s: the payload (pod-level
// assignments and baselines only when s has them: PlanRebuild leaves them
// out when the kubelet's gates do), its checksum, the V2 fields from the
// same payload, and their legacy checksum.
func (s *State) marshalV4(entries map[string]map[string]string) ([]byte, error) {
	cp := &state137.CPUManagerCheckpoint{}
	cp.CheckpointData = state137.CPUManagerCheckpointData{
		PolicyName:    s.PolicyName,
		DefaultCPUSet: s.DefaultCPUSet.String(),
		Entries:       entries,
	}
	if len(s.PodEntries) > 0 {
		cp.CheckpointData.PodEntries = make(state.PodCPUAssignments, len(s.PodEntries))
		for pod, set := range s.PodEntries {
			cp.CheckpointData.PodEntries[pod] = state.PodEntry{CPUSet: set}
		}
	}
	if len(s.Baselines) > 0 {
		cp.CheckpointData.Baselines = make(map[string]map[string]state137.ContainerCPUs, len(s.Baselines))
		for pod, containers := range s.Baselines {
			cp.CheckpointData.Baselines[pod] = make(map[string]state137.ContainerCPUs, len(containers))
			for c, set := range containers {
				cp.CheckpointData.Baselines[pod][c] = state137.ContainerCPUs{Baseline: set.String()}
			}
		}
	}
	data, err := json.Marshal(cp.CheckpointData)
	if err != nil {
		return nil, fmt.Errorf("cpumgr: marshal: %w", err)
	}
	cp.Data = string(data)
	cp.DataChecksum = checksum.Checksum(checksum.Of(dumpString(cp.Data)))
	cp.PolicyName = cp.CheckpointData.PolicyName
	cp.DefaultCPUSet = cp.CheckpointData.DefaultCPUSet
	cp.Entries = cp.CheckpointData.Entries
	cp.Checksum = 0
	cp.Checksum = checksum.Checksum(checksum.Of(strings.Replace(dump.ForHash(&cp.CPUManagerCheckpointV2), "CPUManagerCheckpointV2", "CPUManagerCheckpoint", 1)))
	b, err := json.Marshal(*cp)
	if err != nil {
		return nil, fmt.Errorf("cpumgr: marshal: %w", err)
	}
	return b, nil
}

// dumpString is the kubelet's checksum input for a V4 payload
// (checksum.New(cp.Data)).
func dumpString(s string) string { return dump.ForHash(s) }
