package allocated

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/internal/checksum"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// FileName is the checkpoint's name in the kubelet's root directory
// (allocatedPodsStateFile in pkg/kubelet/allocation, 1.34 to 1.37).
const FileName = "allocated_pods_state"

// GateInPlacePodVerticalScaling is the feature gate under which the kubelet
// keeps the checkpoint.
const GateInPlacePodVerticalScaling = "InPlacePodVerticalScaling"

// The errors Read and Parse wrap; check them with errors.Is.
var (
	// ErrNotExist: no file. The gate was never on, or the kubelet has not
	// admitted a pod since it was turned on: the caller cannot judge. It
	// also matches fs.ErrNotExist.
	ErrNotExist = fmt.Errorf("no %s: the kubelet has admitted no pod with %s on, so the pods' requests are not known", FileName, GateInPlacePodVerticalScaling)
	// ErrGateOff: the kubelet runs with InPlacePodVerticalScaling off
	// (possible only in 1.34): it neither reads nor writes the file, and a
	// file there is stale. The file is not read.
	ErrGateOff = fmt.Errorf("%s is off: the kubelet does not keep %s", GateInPlacePodVerticalScaling, FileName)
	// ErrCorrupt: a file the kubelet's own loader refuses (not JSON, a
	// field of the wrong type, a checksum that does not verify). A kubelet
	// that starts with it panics; see CorruptError.
	ErrCorrupt = errors.New("the kubelet's checkpoint loader refuses the file")
	// ErrUnknownFormat: a file the kubelet loads but that holds something
	// the release hotplugd reads it for does not write (an unknown field, a
	// newer or an older layout): its pods are not judged.
	ErrUnknownFormat = errors.New("a layout this kubelet release does not write")
	// ErrUnknownRelease: a kubelet release this package has no row for.
	ErrUnknownRelease = errors.New("a kubelet release whose allocated pods checkpoint hotplugd does not know")
	// ErrTooLarge: a file larger than statefile.MaxSize.
	ErrTooLarge = statefile.ErrTooLarge
)

// notExist is ErrNotExist that also matches fs.ErrNotExist.
type notExist struct{}

func (e notExist) Error() string { return ErrNotExist.Error() }
func (e notExist) Is(target error) bool {
	return target == ErrNotExist || target == fs.ErrNotExist
}

// CorruptError is a file the kubelet refuses to load. Kubelet is the
// reason in the kubelet's words ("checkpoint is corrupted", "json: cannot
// unmarshal ...").
type CorruptError struct {
	Kubelet string
}

func (e *CorruptError) Error() string {
	return "the kubelet refuses it (" + e.Kubelet + ") and panics at its start: drain the node and delete the file before the kubelet restarts"
}

// Is reports ErrCorrupt.
func (e *CorruptError) Is(target error) bool { return target == ErrCorrupt }

// layout is what one minor release writes.
type layout struct {
	// gateDefault is InPlacePodVerticalScaling's default; gateLocked says
	// it cannot be turned off.
	gateDefault, gateLocked bool
	// podLevel and emptyDir say whether the release writes
	// PodLevelResources and EmptyDirVolumeLimits in an entry.
	podLevel, emptyDir bool
	// initKept: the release keeps regular init containers too (IsResizableContainer)
	// when InPlacePodVerticalScalingInitContainers is on; initLocked: it is
	// always on.
	initKept, initLocked bool
}

// layouts is one row per known minor release, read off each release's
// pkg/kubelet/allocation/state and pkg/features/kube_features.go (checked by
// test/kubeletcompat against the release's own code).
var layouts = map[int]layout{
	34: {gateDefault: true},                                                                                     // InPlacePodVerticalScaling beta
	35: {gateDefault: true, gateLocked: true, podLevel: true},                                                   // GA
	36: {gateDefault: true, gateLocked: true, podLevel: true, initKept: true},                                   // InPlacePodVerticalScalingInitContainers beta
	37: {gateDefault: true, gateLocked: true, podLevel: true, emptyDir: true, initKept: true, initLocked: true}, // GA
}

// GateInitContainers is the gate under which kubelet 1.36 keeps regular
// init containers in the checkpoint (on by default; locked on in 1.37).
const GateInitContainers = "InPlacePodVerticalScalingInitContainers"

// initContainersKept reports whether the release with featureGates keeps
// regular init containers in the file.
func (l layout) initContainersKept(featureGates map[string]bool) bool {
	if !l.initKept {
		return false
	}
	if on, set := featureGates[GateInitContainers]; set && !l.initLocked {
		return on
	}
	return true
}

// Written reports whether the kubelet of release minor with featureGates
// keeps the checkpoint (InPlacePodVerticalScaling on), and false for an
// unknown release. A locked gate is on whatever featureGates says: a
// kubelet told otherwise does not start.
func Written(minor int, featureGates map[string]bool) bool {
	l, ok := layouts[minor]
	if !ok {
		return false
	}
	if on, set := featureGates[GateInPlacePodVerticalScaling]; set && !l.gateLocked {
		return on
	}
	return l.gateDefault
}

// Pod is one pod's entry: the resources the kubelet admitted it with.
type Pod struct {
	UID string
	// Containers are the allocated resources by container name: every app
	// container and sidecar, and the regular init containers where the
	// release stores them (1.36+); the file does not say which is which.
	Containers map[string]v1.ResourceRequirements
	// PodLevel are the pod-level resources, nil unless the kubelet stores
	// them (InPlacePodLevelResourcesVerticalScaling) and the pod has some.
	PodLevel *v1.ResourceRequirements
	// InitContainersKept: the kubelet that wrote the entry keeps regular
	// init containers in Containers (1.36 with
	// InPlacePodVerticalScalingInitContainers, on by default; 1.37), which
	// it counts only at their largest: Requests is then the most it
	// counts, MinRequests the least.
	InitContainersKept bool
}

// Checkpoint is an allocated_pods_state file as read.
type Checkpoint struct {
	// Path is where it was read, "" for Parse.
	Path string
	// Minor is the kubelet release it was read for.
	Minor int
	// Checksum is the checksum as stored (and verified).
	Checksum uint64
	// Pods are its entries, by UID.
	Pods []Pod
}

// Read reads <rootDir>/allocated_pods_state, rootDir being the kubelet's
// root directory as hotplugd sees it, for the kubelet release rel with
// featureGates (its configuration's and flags' gates). It refuses a file
// that is not regular or larger than statefile.MaxSize, and never writes.
// Errors wrap ErrGateOff, ErrNotExist, ErrCorrupt, ErrUnknownFormat,
// ErrUnknownRelease, ErrTooLarge or statefile.ErrNotRegular, and say the
// path and what to do.
func Read(rootDir string, rel *kubeletversion.Release, featureGates map[string]bool) (*Checkpoint, error) {
	path := filepath.Join(rootDir, FileName)
	if rel == nil {
		return nil, fmt.Errorf("allocated: read %s: %w", path, ErrUnknownRelease)
	}
	if _, ok := layouts[rel.Minor]; !ok {
		return nil, fmt.Errorf("allocated: read %s: %w (%s)", path, ErrUnknownRelease, rel)
	}
	if !Written(rel.Minor, featureGates) {
		return nil, fmt.Errorf("allocated: read %s: %w: the running pods' requests are not known", path, ErrGateOff)
	}
	b, err := statefile.Read(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("allocated: read %s: %w", path, notExist{})
	case err != nil:
		return nil, fmt.Errorf("allocated: %w", err)
	}
	cp, err := Parse(b, rel.Minor, featureGates)
	if err != nil {
		return nil, fmt.Errorf("allocated: read %s: %w", path, err)
	}
	cp.Path = path
	return cp, nil
}

// Parse parses the contents of an allocated_pods_state file as the kubelet
// of release minor with featureGates loads it: envelope, checksum of the
// data string, then the data. A file that loader refuses is an ErrCorrupt (CorruptError); one
// it loads is then read again strictly, and anything the release does not
// write (an unknown field, trailing data) is an ErrUnknownFormat.
func Parse(b []byte, minor int, featureGates map[string]bool) (*Checkpoint, error) {
	l, ok := layouts[minor]
	if !ok {
		return nil, fmt.Errorf("%w (kubelet 1.%d)", ErrUnknownRelease, minor)
	}
	// The kubelet's load: json.Unmarshal of the envelope, the checksum,
	// json.Unmarshal of the data (state.Checkpoint, checkpointmanager,
	// restoreState).
	var env struct {
		Data     string            `json:"data"`
		Checksum checksum.Checksum `json:"checksum"`
	}
	if err := json.Unmarshal(b, &env); err != nil {
		return nil, &CorruptError{Kubelet: err.Error()}
	}
	if sum := checksum.Of(dump.ForHash(env.Data)); sum != uint64(env.Checksum) {
		// checkpointmanager/errors.CorruptCheckpointError's text.
		return nil, &CorruptError{Kubelet: "checkpoint is corrupted"}
	}
	var data struct {
		Entries map[string]json.RawMessage `json:"entries,omitempty"`
	}
	if err := json.Unmarshal([]byte(env.Data), &data); err != nil {
		return nil, &CorruptError{Kubelet: "failed to get pod resource information: " + err.Error()}
	}
	for _, raw := range data.Entries {
		if _, err := decodeEntry(raw, l, false); err != nil {
			return nil, &CorruptError{Kubelet: "failed to get pod resource information: " + err.Error()}
		}
	}

	// Strictly: only what this release writes.
	var strictEnv struct {
		Data     *string `json:"data"`
		Checksum *uint64 `json:"checksum"`
	}
	if err := strictDecode(b, &strictEnv); err != nil {
		return nil, formatError(minor, "the file", err)
	}
	if strictEnv.Data == nil || strictEnv.Checksum == nil {
		return nil, formatError(minor, "the file", errors.New(`"data" or "checksum" missing`))
	}
	var strictData struct {
		Entries map[string]json.RawMessage `json:"entries"`
	}
	if err := strictDecode([]byte(env.Data), &strictData); err != nil {
		return nil, formatError(minor, "data", err)
	}
	cp := &Checkpoint{Minor: minor, Checksum: uint64(env.Checksum), Pods: []Pod{}}
	for uid, raw := range strictData.Entries {
		e, err := decodeEntry(raw, l, true)
		if err != nil {
			return nil, formatError(minor, "the entry of pod "+uid, err)
		}
		cp.Pods = append(cp.Pods, Pod{UID: uid, Containers: e.ContainerResources, PodLevel: e.PodLevelResources, InitContainersKept: l.initContainersKept(featureGates)})
	}
	slices.SortFunc(cp.Pods, func(a, b Pod) int { return strings.Compare(a.UID, b.UID) })
	return cp, nil
}

// entry is a PodResourceInfo (pkg/kubelet/allocation/state) with the
// fields hotplugd uses.
type entry struct {
	ContainerResources map[string]v1.ResourceRequirements
	PodLevelResources  *v1.ResourceRequirements
}

// decodeEntry decodes one pod's entry as the release of layout l has it:
// with strict false as its kubelet does (json.Unmarshal, unknown fields
// ignored), with strict true refusing what it does not write.
func decodeEntry(raw []byte, l layout, strict bool) (entry, error) {
	dec := json.Unmarshal
	if strict {
		dec = strictDecode
	}
	switch {
	case l.emptyDir:
		var s struct {
			ContainerResources   map[string]v1.ResourceRequirements
			PodLevelResources    *v1.ResourceRequirements
			EmptyDirVolumeLimits map[string]*resource.Quantity
		}
		err := dec(raw, &s)
		return entry{s.ContainerResources, s.PodLevelResources}, err
	case l.podLevel:
		var s struct {
			ContainerResources map[string]v1.ResourceRequirements
			PodLevelResources  *v1.ResourceRequirements
		}
		err := dec(raw, &s)
		return entry{s.ContainerResources, s.PodLevelResources}, err
	default:
		var s struct {
			ContainerResources map[string]v1.ResourceRequirements
		}
		err := dec(raw, &s)
		return entry{ContainerResources: s.ContainerResources}, err
	}
}

// strictDecode decodes b into v refusing unknown fields and trailing data.
func strictDecode(b []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return err
	}
	if _, err := dec.Token(); err != io.EOF {
		return errors.New("data after the JSON value")
	}
	return nil
}

func formatError(minor int, where string, err error) error {
	return fmt.Errorf("%w: %s: %v (kubelet 1.%d loads the file but this is not what it writes: another kubelet release or a hand edit; the pods' requests are not judged)", ErrUnknownFormat, where, err, minor)
}
