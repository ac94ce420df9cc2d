package memmgr

import (
	"strings"
	"testing"

	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/internal/checksum"
)

// TestChecksumInput pins what the checksum is computed over: the spew dump
// of the checkpoint, under the kubelet's package and type names, with
// checksum 0 (V1 under the legacy name MemoryManagerCheckpoint).
func TestChecksumInput(t *testing.T) {
	cp := newCheckpointV1()
	cp.PolicyName = "None"
	const want = "(*state.MemoryManagerCheckpoint){PolicyName:(string)None MachineState:(state.NUMANodeMap)map[] Entries:(state.ContainerMemoryAssignments)map[] Checksum:(checksum.Checksum)0}"
	if got := strings.Replace(dump.ForHash(cp), "MemoryManagerCheckpointV1", "MemoryManagerCheckpoint", 1); got != want {
		t.Errorf("dump\n got %s\nwant %s", got, want)
	}
	// m01's checksum.
	if got := hashV1Legacy(cp); got != 4236770233 {
		t.Errorf("checksum %d, want m01's 4236770233", got)
	}

	cp2 := newCheckpointV2()
	cp2.PolicyName = "None"
	const want2 = "(*state.MemoryManagerCheckpoint){PolicyName:(string)None MachineState:(state.NUMANodeMap)map[] Entries:(state.ContainerMemoryAssignments)map[] PodEntries:(state.PodMemoryAssignments)map[] Checksum:(checksum.Checksum)0}"
	if got := dump.ForHash(cp2); got != want2 {
		t.Errorf("V2 dump\n got %s\nwant %s", got, want2)
	}

	// Kubelet 1.37's dataChecksum: the dump of the data string (m05's).
	if got := dump.ForHash(`{"policyName":"None"}`); got != `(string){"policyName":"None"}` {
		t.Errorf("data dump %q", got)
	}
	if got := hashData(`{"policyName":"None"}`); got != checksum.Of(`(string){"policyName":"None"}`) {
		t.Errorf("dataChecksum %d", got)
	}
}
