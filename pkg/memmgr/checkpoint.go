package memmgr

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/internal/checksum"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	v134 "github.com/hotplugd/hotplugd/pkg/memmgr/state/v134"
	v137 "github.com/hotplugd/hotplugd/pkg/memmgr/state/v137"
	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// FileName is the state file's name in the kubelet's root directory.
const FileName = "memory_manager_state"

// DefaultPath is where a kubelet with the default root directory keeps it.
const DefaultPath = "/var/lib/kubelet/" + FileName

// Format is the layout (and checksum scheme) of a memory_manager_state.
type Format int

const (
	// FormatV1 is what kubelets up to 1.36 write without pod-level resource
	// managers: policyName, machineState, entries and a checksum over the
	// checkpoint under the legacy type name MemoryManagerCheckpoint. Every
	// known kubelet reads it; kubelets 1.34 and 1.35 read nothing else.
	FormatV1 Format = iota
	// FormatV2 is what kubelet 1.36 writes with the PodLevelResourceManagers
	// feature gate: the same fields plus podEntries, with a checksum that
	// covers podEntries. Kubelets 1.34 and 1.35, and 1.36 without the gate,
	// refuse such a file as corrupted; 1.36 with the gate and 1.37 read it.
	FormatV2
	// FormatV3 is what kubelet 1.37 writes, whatever its gates: the V1
	// fields with their V1 checksum, for older kubelets, plus data (the JSON
	// of policyName, machineState, entries and, with the gate, podEntries)
	// and dataChecksum (over data). Kubelet 1.37 reads data only; older
	// kubelets read the V1 fields.
	FormatV3
)

func (f Format) String() string {
	switch f {
	case FormatV1:
		return "V1"
	case FormatV2:
		return "V2 (podEntries)"
	case FormatV3:
		return "V3 (data)"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// State is a memory_manager_state: the Static memory manager's per-NUMA
// memory accounting (MachineState) and the memory it assigned to each
// Guaranteed container (Entries) or, with pod-level resource managers, pod
// (PodEntries).
type State struct {
	// PolicyName is the memoryManagerPolicy that wrote the file: "None"
	// or "Static".
	PolicyName string
	// MachineState is the accounting per NUMA node and resource.
	MachineState state.NUMANodeMap
	// Entries are the blocks of each container, by pod UID and name.
	Entries state.ContainerMemoryAssignments
	// PodEntries are pod-level blocks (FormatV2, or FormatV3 written with
	// the gate).
	PodEntries state.PodMemoryAssignments
	// Format is the layout the file was read in and is written in. For a
	// FormatV3 file the fields above are those of data, which kubelet 1.37
	// reads; the V1 fields beside it, which older kubelets read, are kept
	// as read.
	Format Format
	// Checksum is the checksum the file carried (for FormatV3 the one of
	// the V1 fields); 0 is accepted unchecked by kubelets from 1.36 on.
	// Marshal always writes the computed one.
	Checksum uint64
	// DataChecksum is the dataChecksum the file carried (FormatV3).
	DataChecksum uint64

	// read is what Parse found; nil for a state built in memory.
	read *readResult
}

// ReadFile reads and parses the state file at path with statefile.Read's
// discipline (size cap, no symlinks). Errors name the path; a missing file
// matches errors.Is(err, fs.ErrNotExist). As with Parse, a file that a
// kubelet refuses is no error here: Validate says so, in that kubelet's
// words, naming the path of its Config.
func ReadFile(path string) (*State, error) {
	b, err := statefile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("memmgr: %w", err)
	}
	s, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return s, nil
}

// Parse decodes a memory_manager_state the way each known kubelet's
// checkpoint loader does and records each one's verdict, so that Validate
// and PlanRebuild answer for the kubelet of their Config:
//
//   - kubelets 1.34 and 1.35 decode FormatV1 and verify its checksum (0
//     included: they do not accept it unchecked);
//   - kubelet 1.36 without PodLevelResourceManagers decodes FormatV1 and
//     accepts checksum 0 or the checksum under either type name; with the
//     gate it tries FormatV2 (podEntries, no checksum 0) first, then
//     FormatV1 with checksum 0 or the legacy checksum;
//   - kubelet 1.37, with or without the gate, tries FormatV3 (data decoded,
//     dataChecksum verified, the V1 checksum ignored) and refuses a file
//     with data or a dataChecksum that fails there ("could not load v3
//     checkpoint: ..."); otherwise it falls back to FormatV2, then FormatV1,
//     as 1.36 with the gate does.
//
// Checksums are FNV-32a hashes of k8s.io/utils/dump ForHash dumps of the
// kubelet's structs (the type names are the kubelet's, see package state),
// dataChecksum the hash of the dump of the data string. JSON is decoded into
// the kubelet's own struct shapes: field names match case-insensitively,
// unknown fields are ignored, and decoding errors are the kubelet's words.
//
// The State holds what the newest kubelet that accepts the file restores
// (for a FormatV3 file, data). A file that some or every kubelet refuses is
// no error here. Parse fails only on input over statefile.MaxSize, and with
// ErrUnsupportedFormat on a file that no known kubelet accepts and that has
// a top-level field none of them writes: a layout hotplugd does not know,
// left to the kubelet to judge.
func Parse(b []byte) (*State, error) {
	if len(b) > statefile.MaxSize {
		return nil, fmt.Errorf("memmgr: state of %d bytes: %w", len(b), statefile.ErrTooLarge)
	}
	s := parse(b)
	if !s.read.acceptedByAny() {
		if key := unknownKey(b); key != "" {
			return nil, fmt.Errorf("memmgr: %w: the file has a field %q that no known kubelet (%s) writes, and none of them accepts it: "+
				"it may come from a newer kubelet; let that kubelet validate it", ErrUnsupportedFormat, key, kubeletversion.Known())
		}
	}
	return s, nil
}

// The kubelet decodes into structs whose maps are already made: a field
// absent from the file stays an empty map, "null" makes it nil, and the two
// hash differently.

func newCheckpointV1() *state.MemoryManagerCheckpointV1 {
	return &state.MemoryManagerCheckpointV1{
		Entries:      state.ContainerMemoryAssignments{},
		MachineState: state.NUMANodeMap{},
	}
}

func newCheckpointV2() *state.MemoryManagerCheckpoint {
	return &state.MemoryManagerCheckpoint{
		Entries:      state.ContainerMemoryAssignments{},
		PodEntries:   state.PodMemoryAssignments{},
		MachineState: state.NUMANodeMap{},
	}
}

func newCheckpoint134() *v134.MemoryManagerCheckpoint {
	return &v134.MemoryManagerCheckpoint{
		Entries:      state.ContainerMemoryAssignments{},
		MachineState: state.NUMANodeMap{},
	}
}

func newCheckpointV3() *v137.MemoryManagerCheckpoint {
	return &v137.MemoryManagerCheckpoint{
		MemoryManagerCheckpointV1: state.MemoryManagerCheckpointV1{
			Entries:      state.ContainerMemoryAssignments{},
			MachineState: state.NUMANodeMap{},
		},
		CheckpointData: v137.MemoryManagerCheckpointData{
			Entries:      state.ContainerMemoryAssignments{},
			PodEntries:   state.PodMemoryAssignments{},
			MachineState: state.NUMANodeMap{},
		},
	}
}

// mayHaveData reports whether b can have a top-level field that decodes
// into kubelet 1.37's data or dataChecksum: without one, its V3 loader finds
// neither and falls back, and decoding b once more can be skipped.
func mayHaveData(b []byte) bool {
	// encoding/json matches field names case-insensitively; a key can only
	// hide "data" behind an escape. ("data" has no letter that folds to a
	// non-ASCII one.)
	return bytes.ContainsRune(b, '\\') || bytes.Contains(bytes.ToLower(b), []byte(`"data`))
}

// unknownKey returns a top-level field of b that no known kubelet reads or
// writes, "" if there is none (or b is no JSON object).
func unknownKey(b []byte) string {
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil {
		return ""
	}
	known := []string{"policyName", "machineState", "entries", "podEntries", "checksum", "data", "dataChecksum"}
	for _, k := range slices.Sorted(maps.Keys(top)) {
		if !slices.ContainsFunc(known, func(n string) bool { return strings.EqualFold(k, n) }) {
			return k
		}
	}
	return ""
}

// Marshal returns the file the kubelet would write for s, in s.Format:
// json.Marshal of the kubelet's checkpoint struct with the kubelet's
// checksums (for FormatV3, kubelet 1.37's MarshalCheckpoint: data the
// compact JSON of the payload, then the V1 fields and their checksum from
// it). Absent maps are written as the kubelet writes them (a kubelet's
// state always has them), so the file verifies when read back.
func (s *State) Marshal() ([]byte, error) {
	var out []byte
	var err error
	switch s.Format {
	case FormatV1:
		if len(s.PodEntries) > 0 {
			return nil, fmt.Errorf("memmgr: marshal: %d pod-level entries cannot be written in format %s", len(s.PodEntries), s.Format)
		}
		cp := state.MemoryManagerCheckpointV1{
			PolicyName:   s.PolicyName,
			MachineState: orEmptyNodes(s.MachineState),
			Entries:      orEmptyEntries(s.Entries),
		}
		cp.Checksum = checksumOf(hashV1Legacy(&cp))
		out, err = json.Marshal(cp)
	case FormatV2:
		cp := state.MemoryManagerCheckpoint{
			PolicyName:   s.PolicyName,
			MachineState: orEmptyNodes(s.MachineState),
			Entries:      orEmptyEntries(s.Entries),
			PodEntries:   s.PodEntries,
		}
		if cp.PodEntries == nil {
			cp.PodEntries = state.PodMemoryAssignments{}
		}
		cp.Checksum = checksumOf(hashV2(&cp))
		out, err = json.Marshal(cp)
	case FormatV3:
		out, err = marshalV3(s)
	default:
		return nil, fmt.Errorf("memmgr: marshal: %w: format %s", ErrUnsupportedFormat, s.Format)
	}
	if err != nil {
		return nil, fmt.Errorf("memmgr: marshal: %w", err)
	}
	// What is written must read back as written: a state whose JSON does
	// not decode to the same dump (which the kubelet would call corrupted)
	// is never written.
	if err := verifyWritten(out, s.Format); err != nil {
		return nil, fmt.Errorf("memmgr: marshal: the written state would not verify: %w", err)
	}
	return out, nil
}

// marshalV3 is kubelet 1.37's storeState and MarshalCheckpoint.
func marshalV3(s *State) ([]byte, error) {
	cp := v137.MemoryManagerCheckpoint{CheckpointData: v137.MemoryManagerCheckpointData{
		PolicyName:   s.PolicyName,
		MachineState: orEmptyNodes(s.MachineState),
		Entries:      orEmptyEntries(s.Entries),
		PodEntries:   s.PodEntries,
	}}
	data, err := json.Marshal(cp.CheckpointData)
	if err != nil {
		return nil, err
	}
	cp.Data = string(data)
	cp.DataChecksum = checksumOf(hashData(cp.Data))
	cp.PolicyName = cp.CheckpointData.PolicyName
	cp.MachineState = cp.CheckpointData.MachineState
	cp.Entries = cp.CheckpointData.Entries
	cp.Checksum = checksumOf(hashV1Legacy(&cp.MemoryManagerCheckpointV1))
	return json.Marshal(cp)
}

// verifyWritten decodes b as the kubelets will and checks its checksums
// in format f.
func verifyWritten(b []byte, f Format) error {
	var ck, want uint64
	switch f {
	case FormatV1:
		cp := newCheckpointV1()
		if err := json.Unmarshal(b, cp); err != nil {
			return err
		}
		ck, want = uint64(cp.Checksum), hashV1Legacy(cp)
	case FormatV2:
		cp := newCheckpointV2()
		if err := json.Unmarshal(b, cp); err != nil {
			return err
		}
		ck, want = uint64(cp.Checksum), hashV2(cp)
	default:
		// Kubelet 1.37 must read data, and older kubelets the V1 fields.
		r := parse(b).read
		for _, rd := range []reader{reader137, reader136} {
			if l := r.loads[rd]; l.refused != nil {
				return fmt.Errorf("%s: %s: %s", rd, l.refused.reason, l.refused.detail)
			}
		}
		if l := r.loads[reader137]; l.layout != FormatV3 {
			return fmt.Errorf("%s reads it as %s", reader137, l.layout)
		}
		return nil
	}
	if ck != want || ck == 0 {
		return fmt.Errorf("checksum %d written, %d read back", ck, want)
	}
	return nil
}

func orEmptyNodes(m state.NUMANodeMap) state.NUMANodeMap {
	if m == nil {
		return state.NUMANodeMap{}
	}
	return m
}

func orEmptyEntries(m state.ContainerMemoryAssignments) state.ContainerMemoryAssignments {
	if m == nil {
		return state.ContainerMemoryAssignments{}
	}
	return m
}

// The kubelet's checksums: FNV-32a of the spew dump (dump.ForHash) of a
// pointer to the checkpoint with its checksum set to 0. dump.ForHash prints
// type names, so the structs in package state carry the kubelet's names.

// hashV2 is the FormatV2 checksum: 1.36 dumps its MemoryManagerCheckpoint,
// 1.37 its MemoryManagerCheckpointV2 with the name replaced by
// MemoryManagerCheckpoint, the same string.
func hashV2(cp *state.MemoryManagerCheckpoint) uint64 {
	c := *cp
	c.Checksum = 0
	return checksum.Of(dump.ForHash(&c))
}

// hashV1Legacy is what kubelets write for the V1 fields (FormatV1, and
// beside data in FormatV3): the dump under the pre-1.36 type name
// MemoryManagerCheckpoint (only the first occurrence, the top-level type, is
// renamed). It is also the dump of the 1.34/1.35 struct of that name, which
// has the same fields.
func hashV1Legacy(cp *state.MemoryManagerCheckpointV1) uint64 {
	c := *cp
	c.Checksum = 0
	return checksum.Of(strings.Replace(dump.ForHash(&c), "MemoryManagerCheckpointV1", "MemoryManagerCheckpoint", 1))
}

// hashV1Name is the V1 layout under its own type name, which kubelet 1.36
// without pod-level resource managers also accepts (no kubelet writes it).
func hashV1Name(cp *state.MemoryManagerCheckpointV1) uint64 {
	c := *cp
	c.Checksum = 0
	return checksum.Of(dump.ForHash(&c))
}

// hashData is kubelet 1.37's dataChecksum, checksum.New(data): the hash of
// the dump of the data string.
func hashData(data string) uint64 {
	return checksum.Of(dump.ForHash(data))
}

func checksumOf(h uint64) checksum.Checksum { return checksum.Checksum(h) }

// Clone returns a deep copy of s.
func (s *State) Clone() *State {
	c := *s
	c.MachineState = cloneNodes(s.MachineState)
	c.Entries = cloneEntries(s.Entries)
	c.PodEntries = clonePodEntries(s.PodEntries)
	return &c
}

// The clones keep nil apart from empty: they hash differently.

func cloneNodes(m state.NUMANodeMap) state.NUMANodeMap {
	if m == nil {
		return nil
	}
	out := make(state.NUMANodeMap, len(m))
	for id, n := range m {
		if n == nil {
			out[id] = nil
			continue
		}
		c := &state.NUMANodeState{NumberOfAssignments: n.NumberOfAssignments, Cells: cloneInts(n.Cells)}
		if n.MemoryMap != nil {
			c.MemoryMap = make(map[v1.ResourceName]*state.MemoryTable, len(n.MemoryMap))
			for r, t := range n.MemoryMap {
				if t == nil {
					c.MemoryMap[r] = nil
					continue
				}
				tc := *t
				c.MemoryMap[r] = &tc
			}
		}
		out[id] = c
	}
	return out
}

func cloneEntries(m state.ContainerMemoryAssignments) state.ContainerMemoryAssignments {
	if m == nil {
		return nil
	}
	out := make(state.ContainerMemoryAssignments, len(m))
	for pod, containers := range m {
		if containers == nil {
			out[pod] = nil
			continue
		}
		cc := make(map[string][]state.Block, len(containers))
		for name, blocks := range containers {
			cc[name] = cloneBlocks(blocks)
		}
		out[pod] = cc
	}
	return out
}

func clonePodEntries(m state.PodMemoryAssignments) state.PodMemoryAssignments {
	if m == nil {
		return nil
	}
	out := make(state.PodMemoryAssignments, len(m))
	for pod, e := range m {
		out[pod] = state.PodEntry{MemoryBlocks: cloneBlocks(e.MemoryBlocks)}
	}
	return out
}

func cloneBlocks(b []state.Block) []state.Block {
	if b == nil {
		return nil
	}
	out := make([]state.Block, len(b))
	for i, blk := range b {
		out[i] = state.Block{NUMAAffinity: cloneInts(blk.NUMAAffinity), Type: blk.Type, Size: blk.Size}
	}
	return out
}

func cloneInts(s []int) []int {
	if s == nil {
		return nil
	}
	return append([]int{}, s...)
}
