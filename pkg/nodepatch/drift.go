package nodepatch

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/pkg/topology"
)

// Prediction is what a kubelet started now on this machine would report.
type Prediction struct {
	// Capacity is cpu, memory and every hugepages-<size>.
	Capacity v1.ResourceList
	// Allocatable is nil when the kubelet's configuration is unknown; then
	// only capacity is compared.
	Allocatable v1.ResourceList
	// Limit says why the prediction is narrower than usual (a kubelet
	// release hotplugd does not know: capacity only, no remedy); it is
	// appended to the condition's message. "" normally.
	Limit string
	// Key identifies the prediction with the kubelet's configuration
	// (remedy.Key): the remedy's journal entries for it are the
	// condition's note. "" when there is no remedy.
	Key string
}

// Field is the part of node.status a difference is in.
type Field string

// The fields compared.
const (
	FieldCapacity    Field = "capacity"
	FieldAllocatable Field = "allocatable"
)

// Difference is one resource the kubelet reports differently from the
// prediction.
type Difference struct {
	Field    Field           `json:"field"`
	Resource v1.ResourceName `json:"resource"`
	// Reported is what the Node says; Predicted what a restarted kubelet
	// would say.
	Reported  resource.Quantity `json:"reported"`
	Predicted resource.Quantity `json:"predicted"`
	// Noise marks a memory difference below the minimum delta: logged,
	// not acted on.
	Noise bool `json:"noise,omitempty"`
}

// String reads "capacity cpu 2 -> 1".
func (d Difference) String() string {
	return fmt.Sprintf("%s %s %s -> %s", d.Field, d.Resource, d.Reported.String(), d.Predicted.String())
}

// Drift is every difference between a Node and the prediction, capacity
// first, then allocatable, each by resource name.
type Drift []Difference

// Significant returns the differences that are not noise.
func (d Drift) Significant() Drift {
	var out Drift
	for _, x := range d {
		if !x.Noise {
			out = append(out, x)
		}
	}
	return out
}

// Stale reports whether some difference is not noise.
func (d Drift) Stale() bool { return len(d.Significant()) > 0 }

// Noise returns the differences below the minimum delta.
func (d Drift) Noise() Drift {
	var out Drift
	for _, x := range d {
		if x.Noise {
			out = append(out, x)
		}
	}
	return out
}

// String is the differences joined by ", ", for messages:
// "capacity cpu 2 -> 1, allocatable cpu 2 -> 1".
func (d Drift) String() string {
	parts := make([]string, len(d))
	for i, x := range d {
		parts[i] = x.String()
	}
	return strings.Join(parts, ", ")
}

// Compare returns how status differs from the prediction. Every resource
// the prediction names is compared (a hugepage size missing from the Node
// counts as zero), and so is every hugepages-* resource the Node reports
// that the machine no longer has; other resources (pods,
// ephemeral-storage, extended resources) are not hotplugd's and are
// ignored. A memory difference (in capacity or allocatable) smaller than
// minMemoryDelta is marked as noise.
func Compare(p Prediction, status v1.NodeStatus, minMemoryDelta resource.Quantity) Drift {
	drift := compareList(FieldCapacity, p.Capacity, status.Capacity, minMemoryDelta)
	if p.Allocatable != nil {
		drift = append(drift, compareList(FieldAllocatable, p.Allocatable, status.Allocatable, minMemoryDelta)...)
	}
	return drift
}

func compareList(field Field, predicted, reported v1.ResourceList, minMemoryDelta resource.Quantity) Drift {
	names := make([]v1.ResourceName, 0, len(predicted))
	for n := range predicted {
		names = append(names, n)
	}
	for n := range reported {
		if _, ok := predicted[n]; !ok && strings.HasPrefix(string(n), v1.ResourceHugePagesPrefix) {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(a, b v1.ResourceName) int { return topology.CompareResources(string(a), string(b)) })

	var out Drift
	for _, n := range names {
		want, rep := predicted[n], reported[n]
		if want.Cmp(rep) == 0 {
			continue
		}
		d := Difference{Field: field, Resource: n, Reported: rep.DeepCopy(), Predicted: want.DeepCopy()}
		if n == v1.ResourceMemory {
			delta := want.DeepCopy()
			delta.Sub(rep)
			if delta.Sign() < 0 {
				delta.Neg()
			}
			d.Noise = delta.Cmp(minMemoryDelta) < 0
		}
		out = append(out, d)
	}
	return out
}

// Predicted is the predicted side of the differences: "capacity cpu 1,
// allocatable cpu 1".
func (d Drift) Predicted() string {
	parts := make([]string, len(d))
	for i, x := range d {
		parts[i] = fmt.Sprintf("%s %s %s", x.Field, x.Resource, x.Predicted.String())
	}
	return strings.Join(parts, ", ")
}
