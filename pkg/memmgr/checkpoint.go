package memmgr

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/pkg/memmgr/internal/checksum"
	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// FileName is the state file's name in the kubelet's root directory.
const FileName = "memory_manager_state"

// DefaultPath is where a kubelet with the default root directory keeps it.
const DefaultPath = "/var/lib/kubelet/" + FileName

// Format is the layout (and checksum scheme) of a memory_manager_state.
type Format int

const (
	// FormatV1 is what kubelets write by default (every release up to 1.36
	// without pod-level resource managers): policyName, machineState,
	// entries and a checksum over the checkpoint under the legacy type name
	// MemoryManagerCheckpoint.
	FormatV1 Format = iota
	// FormatV2 is what kubelet 1.36 writes with the PodLevelResourceManagers
	// feature gate: the same fields plus podEntries, with a checksum that
	// covers podEntries. A kubelet without the gate refuses such a file as
	// corrupted; a kubelet with the gate reads FormatV1 files too.
	FormatV2
)

func (f Format) String() string {
	switch f {
	case FormatV1:
		return "V1"
	case FormatV2:
		return "V2 (podEntries)"
	}
	return fmt.Sprintf("Format(%d)", int(f))
}

// verification records which of the kubelet's checksum rules a parsed file
// passed; whether a kubelet accepts the file depends on it and on the
// kubelet's feature gates.
type verification int

const (
	notParsed      verification = iota // built in memory, not read
	verifiedZero                       // checksum 0: accepted unchecked by the V1 loader
	verifiedLegacy                     // V1 struct hashed under the legacy name (what kubelets write)
	verifiedV1Name                     // V1 struct hashed under its own name (only a gate-off kubelet tries it)
	verifiedV2                         // V2 struct, podEntries included
)

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
	// PodEntries are pod-level blocks (FormatV2 only).
	PodEntries state.PodMemoryAssignments
	// Format is the layout the file was read in and is written in.
	Format Format
	// Checksum is the checksum the file carried; 0 is accepted unchecked
	// by the kubelet. Marshal always writes the computed one.
	Checksum uint64

	verified verification
}

// ReadFile reads and parses the state file at path with statefile.Read's
// discipline (size cap, no symlinks). Errors name the path; a missing file
// matches errors.Is(err, fs.ErrNotExist).
func ReadFile(path string) (*State, error) {
	b, err := statefile.Read(path)
	if err != nil {
		return nil, fmt.Errorf("memmgr: %w", err)
	}
	s, err := parse(b, path)
	var ke *KubeletError
	switch {
	case errors.As(err, &ke):
		if !strings.Contains(ke.Kubelet, path) {
			ke.Detail = path + ": " + ke.Detail
		}
		return nil, ke
	case err != nil:
		return nil, fmt.Errorf("%w (%s)", err, path)
	}
	return s, nil
}

// Parse decodes a memory_manager_state and verifies its checksum exactly as
// the kubelet does: the JSON is decoded into the kubelet's own struct
// shapes (field names matched case-insensitively, unknown fields ignored),
// and the checksum must be 0 (accepted unchecked) or the FNV-32a hash of
// the dump of the checkpoint with checksum 0 in one of the layouts kubelets
// write: FormatV1 (legacy type name, the default) or FormatV2 (podEntries).
// A file in kubelet 1.37's data/dataChecksum layout is refused with
// ErrUnsupportedFormat. Errors are *KubeletError carrying the kubelet's own
// message (for a file named DefaultPath).
func Parse(b []byte) (*State, error) {
	return parse(b, DefaultPath)
}

func parse(b []byte, path string) (*State, error) {
	if len(b) > statefile.MaxSize {
		return nil, fmt.Errorf("memmgr: state of %d bytes: %w", len(b), statefile.ErrTooLarge)
	}
	if key := newerLayoutKey(b); key != "" {
		return nil, &KubeletError{
			Kind:    ErrUnsupportedFormat,
			Kubelet: "(kubelet 1.37 or later layout)",
			Detail: fmt.Sprintf("the file has a %q field: it was written by kubelet 1.37 or later in the data/dataChecksum layout, which hotplugd does not read; "+
				"let that kubelet validate it", key),
		}
	}

	// One decode serves both layouts: V2's fields are V1's plus
	// podEntries, so when V2 decodes, V1 decodes to the same values. When
	// it does not (podEntries of a wrong type), V1 is decoded on its own,
	// and its error is the one every kubelet reports.
	cp2 := newCheckpointV2()
	v2err := json.Unmarshal(b, cp2)
	var cp1 *state.MemoryManagerCheckpointV1
	if v2err == nil {
		cp1 = &state.MemoryManagerCheckpointV1{PolicyName: cp2.PolicyName, MachineState: cp2.MachineState, Entries: cp2.Entries, Checksum: cp2.Checksum}
	} else {
		cp1 = newCheckpointV1()
		if err := json.Unmarshal(b, cp1); err != nil {
			return nil, restoreError(ErrInvalid, err.Error(), path, "", err)
		}
	}
	ck := uint64(cp1.Checksum)
	s := &State{
		PolicyName:   cp1.PolicyName,
		MachineState: cp1.MachineState,
		Entries:      cp1.Entries,
		Format:       FormatV1,
		Checksum:     ck,
	}
	// The kubelet tries V2 first (with the gate) and V1 second; a file
	// matching both would need two dumps with the same FNV-32a hash. The
	// common V1 hash is tried first because it is the common case.
	switch {
	case ck == 0:
		// Accepted unchecked by the V1 loader, for compatibility with the
		// kubelet's old file backend; podEntries, if any, are ignored.
		s.verified = verifiedZero
	case ck == hashV1Legacy(cp1):
		s.verified = verifiedLegacy
	case v2err == nil && ck == hashV2(cp2):
		s.PodEntries = cp2.PodEntries
		s.Format = FormatV2
		s.verified = verifiedV2
	case ck == hashV1Name(cp1):
		s.verified = verifiedV1Name
	default:
		detail := fmt.Sprintf("checksum %d in the file, %d computed for the default layout", ck, hashV1Legacy(cp1))
		if v2err == nil {
			detail += fmt.Sprintf(", %d with podEntries", hashV2(cp2))
		}
		return nil, restoreError(ErrCorrupt, "checkpoint is corrupted", path, detail, nil)
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

// newerLayoutKey returns the name of a top-level field of kubelet 1.37's
// data/dataChecksum layout, "" if there is none (or b is no JSON object).
func newerLayoutKey(b []byte) string {
	// Decoding the top level costs as much as the rest; skip it when no
	// key can be "data..." (a key could only hide it behind an escape).
	if !bytes.ContainsRune(b, '\\') && !bytes.Contains(bytes.ToLower(b), []byte(`"data`)) {
		return ""
	}
	var top map[string]json.RawMessage
	if json.Unmarshal(b, &top) != nil {
		return ""
	}
	for k := range top {
		// encoding/json matches field names case-insensitively.
		if strings.EqualFold(k, "data") || strings.EqualFold(k, "dataChecksum") {
			return k
		}
	}
	return ""
}

// Marshal returns the file the kubelet would write for s, in s.Format:
// json.Marshal of the kubelet's checkpoint struct with the kubelet's
// checksum. Absent maps are written as the kubelet writes them (a kubelet's
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
	default:
		return nil, fmt.Errorf("memmgr: marshal: unknown format %s", s.Format)
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

// verifyWritten decodes b as the kubelet will and checks its checksum in
// format f.
func verifyWritten(b []byte, f Format) error {
	var ck, want uint64
	switch f {
	case FormatV1:
		cp := newCheckpointV1()
		if err := json.Unmarshal(b, cp); err != nil {
			return err
		}
		ck, want = uint64(cp.Checksum), hashV1Legacy(cp)
	default:
		cp := newCheckpointV2()
		if err := json.Unmarshal(b, cp); err != nil {
			return err
		}
		ck, want = uint64(cp.Checksum), hashV2(cp)
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

// The kubelet's checksum: FNV-32a of the spew dump (dump.ForHash) of a
// pointer to the checkpoint with its checksum set to 0. dump.ForHash prints
// type names, so the structs in package state carry the kubelet's names.

func hashV2(cp *state.MemoryManagerCheckpoint) uint64 {
	c := *cp
	c.Checksum = 0
	return fnv32a(dump.ForHash(&c))
}

// hashV1Legacy is what kubelets write for the V1 layout: the dump under the
// pre-1.36 type name MemoryManagerCheckpoint (only the first occurrence,
// the top-level type, is renamed).
func hashV1Legacy(cp *state.MemoryManagerCheckpointV1) uint64 {
	c := *cp
	c.Checksum = 0
	return fnv32a(strings.Replace(dump.ForHash(&c), "MemoryManagerCheckpointV1", "MemoryManagerCheckpoint", 1))
}

// hashV1Name is the V1 layout under its own type name, which a kubelet
// without pod-level resource managers also accepts (no kubelet writes it).
func hashV1Name(cp *state.MemoryManagerCheckpointV1) uint64 {
	c := *cp
	c.Checksum = 0
	return fnv32a(dump.ForHash(&c))
}

func checksumOf(h uint64) checksum.Checksum { return checksum.Checksum(h) }

func fnv32a(s string) uint64 {
	h := fnv.New32a()
	h.Write([]byte(s))
	return uint64(h.Sum32())
}

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
