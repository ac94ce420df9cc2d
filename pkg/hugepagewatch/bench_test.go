package hugepagewatch_test

import (
	"testing"

	"github.com/hotplugd/hotplugd/pkg/hugepagewatch"
)

// BenchmarkRescan measures a Rescan that finds nothing new on this machine's
// /sys and /proc: the cost of calling it on every node or memory uevent.
func BenchmarkRescan(b *testing.B) {
	w, err := hugepagewatch.New("/sys", "/proc", nil)
	if err != nil {
		b.Fatal(err)
	}
	defer w.Close()
	for b.Loop() {
		if _, err := w.Rescan(); err != nil {
			b.Fatal(err)
		}
	}
}
