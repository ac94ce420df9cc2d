package memmgr

import (
	"encoding/json"
	"errors"
	"fmt"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/memmgr/state"
	v137 "github.com/hotplugd/hotplugd/pkg/memmgr/state/v137"
)

// reader is one kubelet checkpoint loader (state.NewCheckpointState): a
// release's code, with or without the PodLevelResourceManagers feature gate
// where that changes what it reads.
type reader int

const (
	reader134     reader = iota // kubelets 1.34 and 1.35 (kubeletversion.MemStateV1)
	reader136                   // kubelet 1.36 without PodLevelResourceManagers
	reader136Pods               // kubelet 1.36 with it
	reader137                   // kubelet 1.37 without PodLevelResourceManagers
	reader137Pods               // kubelet 1.37 with it
	numReaders
)

func (r reader) String() string {
	switch r {
	case reader134:
		return "kubelet 1.34/1.35"
	case reader136:
		return "kubelet 1.36 without PodLevelResourceManagers"
	case reader136Pods:
		return "kubelet 1.36 with PodLevelResourceManagers"
	case reader137:
		return "kubelet 1.37 without PodLevelResourceManagers"
	case reader137Pods:
		return "kubelet 1.37 with PodLevelResourceManagers"
	}
	return fmt.Sprintf("reader(%d)", int(r))
}

// readerFor returns the loader of the kubelet cfg describes.
func readerFor(cfg Config) (reader, error) {
	rel := cfg.release()
	gate := cfg.PodLevelResourceManagers
	switch rel.MemState {
	case kubeletversion.MemStateV1:
		return reader134, nil
	case kubeletversion.MemStateV1V2:
		if gate {
			return reader136Pods, nil
		}
		return reader136, nil
	case kubeletversion.MemStateV3:
		if gate {
			return reader137Pods, nil
		}
		return reader137, nil
	}
	return 0, fmt.Errorf("memmgr: %s: %w: memory_manager_state layout %q", rel, ErrUnsupportedFormat, rel.MemState)
}

// formatFor is the layout the kubelet cfg describes writes.
func formatFor(cfg Config) Format {
	switch cfg.release().MemState {
	case kubeletversion.MemStateV3:
		return FormatV3
	case kubeletversion.MemStateV1V2:
		if cfg.PodLevelResourceManagers {
			return FormatV2
		}
	}
	return FormatV1
}

// writesPods says whether the kubelet cfg describes keeps and writes
// pod-level entries: 1.36 and 1.37 with PodLevelResourceManagers.
func writesPods(cfg Config) bool {
	return cfg.PodLevelResourceManagers && formatFor(cfg) != FormatV1
}

// load is what one reader makes of a file.
type load struct {
	// refused is why it refuses the file, nil when it restores it.
	refused *refusal
	// layout is the layout it restores: FormatV3 (data), FormatV2 or
	// FormatV1 (which 1.36 with the gate and 1.37 migrate in memory, without
	// writing the file).
	layout Format
	// pods says it restores the pod-level entries.
	pods bool
}

// refusal is a kubelet's reason for not restoring its state from a file.
type refusal struct {
	kind error // ErrInvalid or ErrCorrupt
	// reason is the kubelet's error, which NewCheckpointState wraps in
	// "could not restore state from checkpoint: ..., please drain ...".
	reason string
	// detail is hotplugd's explanation.
	detail string
	cause  error
}

func (r *refusal) err(path string) error {
	return restoreError(r.kind, r.reason, path, r.detail, r.cause)
}

// readResult is what Parse found.
type readResult struct {
	// format is State.Format as parsed: the loads hold for it.
	format Format
	loads  [numReaders]load
	// outer are the V1 fields of a FormatV3 file (with podEntries, if a V2
	// checksum verified over them), which the readers before 1.37 restore.
	outer *State
}

func (r *readResult) acceptedByAny() bool {
	for _, l := range r.loads {
		if l.refused == nil {
			return true
		}
	}
	return false
}

// parse runs every reader over b.
func parse(b []byte) *State {
	// The top-level fields, as the V2 and V1 loaders decode them. V2's
	// fields are V1's plus podEntries, so when V2 decodes, V1 decodes to the
	// same values. When it does not (podEntries of a wrong type), V1 is
	// decoded on its own, and when that fails too, 1.34's struct, whose JSON
	// errors name it differently.
	cp2 := newCheckpointV2()
	v2err := json.Unmarshal(b, cp2)
	cp1 := &state.MemoryManagerCheckpointV1{PolicyName: cp2.PolicyName, MachineState: cp2.MachineState, Entries: cp2.Entries, Checksum: cp2.Checksum}
	var v1err, err134 error
	if v2err != nil {
		cp1 = newCheckpointV1()
		if v1err = json.Unmarshal(b, cp1); v1err != nil {
			err134 = json.Unmarshal(b, newCheckpoint134())
		}
	}

	// The checksums over the top-level fields. A file cannot verify under
	// two of them unless two dumps share an FNV-32a hash, so each is only
	// computed when the ones before did not match.
	ck := uint64(cp1.Checksum)
	var legacy, v2, v1Name bool
	if v1err == nil {
		legacy = ck == hashV1Legacy(cp1)
		v2 = !legacy && v2err == nil && ck != 0 && ck == hashV2(cp2)
		v1Name = !legacy && !v2 && ck != 0 && ck == hashV1Name(cp1)
	}
	corrupt := func(detail string) *refusal {
		return &refusal{kind: ErrCorrupt, reason: "checkpoint is corrupted", detail: detail}
	}
	invalid := func(err error) *refusal {
		return &refusal{kind: ErrInvalid, reason: err.Error(), cause: err}
	}
	mismatch := func(layouts string) string {
		if v1err != nil {
			return ""
		}
		d := fmt.Sprintf("checksum %d in the file, %d computed for the V1 layout", ck, hashV1Legacy(cp1))
		if layouts == "V1/V2" && v2err == nil {
			d += fmt.Sprintf(", %d with podEntries", hashV2(cp2))
		}
		return d
	}
	const v2Unread = "the file is in format V2 (podEntries), written by kubelet 1.36 with the PodLevelResourceManagers feature gate, which this kubelet does not read"

	// v1Loader is the V1 loader of 1.36 with the gate and of 1.37:
	// checksum 0 or the legacy checksum.
	v1Loader := func() load {
		switch {
		case v1err != nil:
			return load{refused: invalid(v1err)}
		case ck == 0 || legacy:
			return load{layout: FormatV1}
		}
		return load{refused: corrupt(mismatch("V1/V2"))}
	}

	r := &readResult{}
	// Kubelets 1.34 and 1.35: their one struct, checksum verified, 0
	// included.
	switch {
	case err134 != nil:
		r.loads[reader134] = load{refused: invalid(err134)}
	case legacy:
		r.loads[reader134] = load{layout: FormatV1}
	case v2:
		r.loads[reader134] = load{refused: corrupt(v2Unread)}
	case ck == 0:
		r.loads[reader134] = load{refused: corrupt(fmt.Sprintf("the checksum is 0, which kubelets before 1.36 do not accept unchecked (%d computed)", hashV1Legacy(cp1)))}
	default:
		r.loads[reader134] = load{refused: corrupt(mismatch("V1"))}
	}
	// Kubelet 1.36 without the gate: V1, checksum 0 or under either name.
	switch {
	case v1err != nil:
		r.loads[reader136] = load{refused: invalid(v1err)}
	case ck == 0 || legacy || v1Name:
		r.loads[reader136] = load{layout: FormatV1}
	case v2:
		r.loads[reader136] = load{refused: corrupt(v2Unread)}
	default:
		r.loads[reader136] = load{refused: corrupt(mismatch("V1"))}
	}
	// Kubelet 1.36 with the gate: V2, else V1.
	if v2 {
		r.loads[reader136Pods] = load{layout: FormatV2, pods: true}
	} else {
		r.loads[reader136Pods] = v1Loader()
	}
	// Kubelet 1.37: V3, else V2, else V1; the gate only decides whether
	// the pod-level entries are restored.
	cp3, l3 := loadV3(b)
	switch {
	case l3 != nil:
	case v2:
		l3 = &load{layout: FormatV2}
	default:
		l := v1Loader()
		l3 = &l
	}
	r.loads[reader137] = *l3
	r.loads[reader137Pods] = *l3
	r.loads[reader137Pods].pods = l3.refused == nil && l3.layout != FormatV1

	s := &State{
		PolicyName:   cp1.PolicyName,
		MachineState: cp1.MachineState,
		Entries:      cp1.Entries,
		Format:       FormatV1,
		Checksum:     ck,
		read:         r,
	}
	if v2 {
		s.PodEntries = cp2.PodEntries
		s.Format = FormatV2
	}
	if cp3 != nil {
		s.DataChecksum = uint64(cp3.DataChecksum)
		if l3.refused == nil && l3.layout == FormatV3 {
			r.outer = s
			s = &State{
				PolicyName:   cp3.CheckpointData.PolicyName,
				MachineState: cp3.CheckpointData.MachineState,
				Entries:      cp3.CheckpointData.Entries,
				PodEntries:   cp3.CheckpointData.PodEntries,
				Format:       FormatV3,
				Checksum:     ck,
				DataChecksum: uint64(cp3.DataChecksum),
				read:         r,
			}
		}
	}
	r.format = s.Format
	return s
}

// loadV3 is kubelet 1.37's V3 loader (loadAndMigrateCheckpointV3 up to the
// fall-back): nil when it falls back to V2, else what it loads. The
// checkpoint is returned when b was decoded.
func loadV3(b []byte) (*v137.MemoryManagerCheckpoint, *load) {
	if !mayHaveData(b) {
		return nil, nil // no data, no dataChecksum: it falls back
	}
	cp := newCheckpointV3()
	err := json.Unmarshal(b, cp)
	kind := ErrInvalid
	if err != nil {
		err = fmt.Errorf("failed to deserialize memory manager checkpoint: %w", err)
	} else if err = json.Unmarshal([]byte(cp.Data), &cp.CheckpointData); err != nil {
		err = fmt.Errorf("failed to deserialize memory manager checkpoint data: %w", err)
	} else if sum := hashData(cp.Data); uint64(cp.DataChecksum) != sum {
		kind = ErrCorrupt
		err = errors.New("checkpoint is corrupted")
	}
	switch {
	case err == nil:
		return cp, &load{layout: FormatV3}
	case len(cp.Data) > 0 || cp.DataChecksum != 0:
		// "This is a corrupted V3 checkpoint version. Don't fall back to
		// previous versions."
		detail := "the file has data or a dataChecksum, so kubelet 1.37 reads data only and does not fall back to the older fields beside it"
		if kind == ErrCorrupt {
			detail = fmt.Sprintf("dataChecksum %d in the file, %d computed over data; %s", cp.DataChecksum, hashData(cp.Data), detail)
		}
		return cp, &load{refused: &refusal{kind: kind, reason: "could not load v3 checkpoint: " + err.Error(), detail: detail, cause: err}}
	}
	return cp, nil
}

// loads returns each reader's verdict on s. For a state built in memory, or
// whose Format was changed since it was read, that is the verdict on the
// file Marshal writes for it.
func (s *State) loads() [numReaders]load {
	if s.read != nil && s.read.format == s.Format {
		return s.read.loads
	}
	return writtenLoads(s.Format)
}

// writtenLoads are the readers' verdicts on a file Marshal writes in f.
func writtenLoads(f Format) [numReaders]load {
	var out [numReaders]load
	switch f {
	case FormatV2:
		unread := &refusal{kind: ErrCorrupt, reason: "checkpoint is corrupted",
			detail: "the state is in format V2 (podEntries), which only kubelet 1.36 with the PodLevelResourceManagers feature gate and kubelet 1.37 read"}
		out[reader134] = load{refused: unread}
		out[reader136] = load{refused: unread}
		out[reader136Pods] = load{layout: FormatV2, pods: true}
		out[reader137] = load{layout: FormatV2}
		out[reader137Pods] = load{layout: FormatV2, pods: true}
	case FormatV3:
		for r := range numReaders {
			out[r] = load{layout: FormatV1}
		}
		out[reader137] = load{layout: FormatV3}
		out[reader137Pods] = load{layout: FormatV3, pods: true}
	default:
		for r := range numReaders {
			out[r] = load{layout: FormatV1}
		}
	}
	return out
}

// restored returns the state the kubelet cfg describes restores from s
// (NewCheckpointState: what its loader reads, pod-level entries only when it
// restores them) and whether it restored pod-level entries, or its refusal.
func restored(s *State, cfg Config) (*State, bool, error) {
	rd, err := readerFor(cfg)
	if err != nil {
		return nil, false, err
	}
	l := s.loads()[rd]
	if l.refused != nil {
		return nil, false, l.refused.err(cfg.path())
	}
	src := s
	if s.Format == FormatV3 && l.layout != FormatV3 && s.read != nil && s.read.format == s.Format {
		// An older kubelet reads the V1 fields beside data.
		src = s.read.outer
	}
	v := &State{PolicyName: src.PolicyName, MachineState: src.MachineState, Entries: src.Entries, Format: l.layout}
	if l.pods {
		v.PodEntries = src.PodEntries
	}
	return v, l.pods, nil
}

// unreadLayout says whether the kubelet cfg describes refuses s only
// because s verified in a layout that kubelet does not read (FormatV2 under
// a kubelet without pod-level resource managers): PlanRebuild rewrites such
// a file in the kubelet's layout from what verified. Any other refusal is
// a damaged file, left to a person.
func unreadLayout(s *State, cfg Config) bool {
	rd, err := readerFor(cfg)
	if err != nil || s.Format != FormatV2 {
		return false
	}
	return (rd == reader134 || rd == reader136) && s.loads()[reader136Pods].refused == nil
}
