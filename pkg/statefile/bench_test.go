package statefile_test

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// BenchmarkWrite replaces a 16 KiB state file, backup included: two
// temporary files, two file fsyncs and two directory fsyncs per Write, on
// the file system of the test's temporary directory. The backup is removed
// outside the timed part so the directory does not grow.
func BenchmarkWrite(b *testing.B) {
	path := filepath.Join(b.TempDir(), "cpu_manager_state")
	contents := [2][]byte{bytes.Repeat([]byte("a"), 16<<10), bytes.Repeat([]byte("b"), 16<<10)}
	now := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	if _, err := statefile.Write(path, contents[1], now); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(16 << 10)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		i++
		backup, err := statefile.Write(path, contents[i%2], now.Add(time.Duration(i)))
		if err != nil {
			b.Fatal(err)
		}
		b.StopTimer()
		if err := os.Remove(backup); err != nil {
			b.Fatal(err)
		}
		b.StartTimer()
	}
}
