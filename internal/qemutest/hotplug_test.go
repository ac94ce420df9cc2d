package qemutest

import "testing"

func TestMemTotal(t *testing.T) {
	got, err := MemTotal("MemTotal:        2007031808 kB\nMemFree:  1 kB\n")
	if err != nil || got != 2007031808<<10 {
		t.Errorf("MemTotal = %d, %v; want %d", got, err, int64(2007031808)<<10)
	}
	for _, bad := range []string{"", "MemFree: 1 kB\n", "MemTotal: x kB\n", "MemTotal: 1 MB\n"} {
		if got, err := MemTotal(bad); err == nil {
			t.Errorf("MemTotal(%q) = %d, want an error", bad, got)
		}
	}
}
