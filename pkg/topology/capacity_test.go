package topology

import (
	"testing"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestHugePageResourceName checks the names HugePageResourceName gives
// without building a quantity against the quantity's.
func TestHugePageResourceName(t *testing.T) {
	for _, kib := range []uint64{64, 2048, 32768, 524288, 1048576, 16777216} {
		want := v1.ResourceName(v1.ResourceHugePagesPrefix + resource.NewQuantity(int64(kib*1024), resource.BinarySI).String())
		if got := HugePageResourceName(kib); got != want {
			t.Errorf("HugePageResourceName(%d) = %s, want %s", kib, got, want)
		}
	}
}
