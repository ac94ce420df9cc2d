package nodepatch

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

func list(kv ...string) v1.ResourceList {
	l := v1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestCompare(t *testing.T) {
	machine := list("cpu", "2", "memory", "24684092Ki", "hugepages-2Mi", "0", "hugepages-1Gi", "0")
	minDelta := resource.MustParse("100Mi")
	tests := []struct {
		name     string
		pred     Prediction
		status   v1.NodeStatus
		want     []string // Difference.String(), "~" prefix for noise
		stale    bool
		predText string
	}{
		{
			name:   "equal, extra resources ignored",
			pred:   Prediction{Capacity: machine},
			status: v1.NodeStatus{Capacity: list("cpu", "2", "memory", "24684092Ki", "hugepages-2Mi", "0", "hugepages-1Gi", "0", "pods", "110", "ephemeral-storage", "10Gi", "example.com/foo", "3")},
		},
		{
			name:   "equal quantities in other formats",
			pred:   Prediction{Capacity: list("cpu", "2", "memory", "1Gi")},
			status: v1.NodeStatus{Capacity: list("cpu", "2000m", "memory", "1073741824")},
		},
		{
			name:   "cpu offline",
			pred:   Prediction{Capacity: list("cpu", "1", "memory", "1Gi")},
			status: v1.NodeStatus{Capacity: list("cpu", "2", "memory", "1Gi")},
			want:   []string{"capacity cpu 2 -> 1"}, stale: true, predText: "capacity cpu 1",
		},
		{
			name:   "hugepages missing on the node count as zero",
			pred:   Prediction{Capacity: list("cpu", "1", "hugepages-2Mi", "128Mi")},
			status: v1.NodeStatus{Capacity: list("cpu", "1")},
			want:   []string{"capacity hugepages-2Mi 0 -> 128Mi"}, stale: true,
		},
		{
			name:   "a hugepage size the machine lost",
			pred:   Prediction{Capacity: list("cpu", "1")},
			status: v1.NodeStatus{Capacity: list("cpu", "1", "hugepages-1Gi", "2Gi")},
			want:   []string{"capacity hugepages-1Gi 2Gi -> 0"}, stale: true,
		},
		{
			name:   "memory below the delta is noise",
			pred:   Prediction{Capacity: list("memory", "1000Mi")},
			status: v1.NodeStatus{Capacity: list("memory", "901Mi")},
			want:   []string{"~capacity memory 901Mi -> 1000Mi"},
		},
		{
			name:   "memory shrinking below the delta is noise",
			pred:   Prediction{Capacity: list("memory", "901Mi")},
			status: v1.NodeStatus{Capacity: list("memory", "1000Mi")},
			want:   []string{"~capacity memory 1000Mi -> 901Mi"},
		},
		{
			name:   "memory at the delta is drift (a 128Mi block is)",
			pred:   Prediction{Capacity: list("memory", "1100Mi")},
			status: v1.NodeStatus{Capacity: list("memory", "1000Mi")},
			want:   []string{"capacity memory 1000Mi -> 1100Mi"}, stale: true,
		},
		{
			name: "allocatable compared when known, capacity first",
			pred: Prediction{Capacity: list("cpu", "2", "memory", "2Gi", "hugepages-2Mi", "128Mi"),
				Allocatable: list("cpu", "1", "memory", "1920Mi", "hugepages-2Mi", "128Mi")},
			status: v1.NodeStatus{Capacity: list("cpu", "2", "memory", "2Gi", "hugepages-2Mi", "0"),
				Allocatable: list("cpu", "1", "memory", "2Gi", "hugepages-2Mi", "0")},
			want:  []string{"capacity hugepages-2Mi 0 -> 128Mi", "allocatable memory 2Gi -> 1920Mi", "allocatable hugepages-2Mi 0 -> 128Mi"},
			stale: true, predText: "capacity hugepages-2Mi 128Mi, allocatable memory 1920Mi, allocatable hugepages-2Mi 128Mi",
		},
		{
			name:   "allocatable ignored when unknown",
			pred:   Prediction{Capacity: list("cpu", "2")},
			status: v1.NodeStatus{Capacity: list("cpu", "2"), Allocatable: list("cpu", "1")},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			d := Compare(tt.pred, tt.status, minDelta)
			var got []string
			for _, x := range d {
				s := x.String()
				if x.Noise {
					s = "~" + s
				}
				got = append(got, s)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("unexpected drift (-want +got):\n%s", diff)
			}
			if d.Stale() != tt.stale {
				t.Errorf("Stale() = %v, want %v", d.Stale(), tt.stale)
			}
			if tt.predText != "" && d.Significant().Predicted() != tt.predText {
				t.Errorf("Predicted() = %q, want %q", d.Significant().Predicted(), tt.predText)
			}
		})
	}
}
