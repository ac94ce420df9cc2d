package main

import (
	"os"
	"strings"
	"testing"
)

// TestREADMESnapshotExample: docs/reference.md's `hotplugd snapshot` example runs
// without --kubelet-config, where the code reserves nothing (a kubelet
// without a config file has no hard eviction thresholds): every allocatable
// there must equal its capacity, and the help must not claim otherwise.
func TestREADMESnapshotExample(t *testing.T) {
	b, err := os.ReadFile(referenceDoc)
	if err != nil {
		t.Fatal(err)
	}
	readme := string(b)
	i := strings.Index(readme, "Example (a 2-CPU VM")
	if i < 0 {
		t.Fatal("docs/reference.md: no snapshot example")
	}
	block := readme[i:]
	block = block[strings.Index(block, "RESOURCE"):]
	block = block[:strings.Index(block, "\n\n")]
	rows := strings.Split(block, "\n")[1:]
	if len(rows) < 2 {
		t.Fatalf("docs/reference.md: snapshot example table too short:\n%s", block)
	}
	for _, row := range rows {
		f := strings.Fields(row)
		if len(f) != 3 || f[1] != f[2] {
			t.Errorf("docs/reference.md example row %q: allocatable must equal capacity without --kubelet-config", row)
		}
	}
	code, _, stderr := runCmd("snapshot", "--help")
	if code != 0 || strings.Contains(stderr, "i.e. only the default evictionHard") || !strings.Contains(stderr, "reserves nothing") {
		t.Errorf("snapshot --help (exit %d) about the default:\n%s", code, stderr)
	}
}
