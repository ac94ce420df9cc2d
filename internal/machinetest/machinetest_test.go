package machinetest

import (
	"testing"
)

// TestIntegrationRestore checks that what a subtest changes is back when it
// ends. (Cleanup runs on failure too; that is the testing package's promise.)
func TestIntegrationRestore(t *testing.T) {
	m := Acquire(t)
	const hp = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
	cpu := "/sys/devices/system/cpu/cpu1/online"
	oldHP, err := read(hp)
	if err != nil {
		t.Skipf("no 2Mi hugepages here: %v", err)
	}
	oldCPU, err := read(cpu)
	if err != nil {
		t.Skipf("cpu1 is not hot-pluggable here: %v", err)
	}

	t.Run("change", func(t *testing.T) {
		m.SetCPUOnline(t, 1, false)
		m.SetHugePages(t, hp, 4)
		if got, _ := read(cpu); got != "0" {
			t.Errorf("cpu1 online = %s, want 0", got)
		}
		if got, _ := read(hp); got != "4" {
			t.Errorf("nr_hugepages = %s, want 4", got)
		}
	})
	if got, _ := read(hp); got != oldHP {
		t.Errorf("nr_hugepages = %s after the subtest, want %s", got, oldHP)
	}
	if got, _ := read(cpu); got != oldCPU {
		t.Errorf("cpu1 online = %s after the subtest, want %s", got, oldCPU)
	}
}
