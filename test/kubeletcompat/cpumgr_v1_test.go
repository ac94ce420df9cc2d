//go:build !kubelet_1_37

package kubeletcompat_test

import (
	"strings"
	"testing"

	cpustate "k8s.io/kubernetes/pkg/kubelet/cm/cpumanager/state"
	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// Kubelets up to 1.36 have a V1 checkpoint type; 1.37 reads no V1 files.

// TestCPUManagerV1MarshalCheckpoint records the kubelet's V1 writer
// disagreeing with its V1 reader, the reason v1Checkpoint hashes by hand.
func TestCPUManagerV1MarshalCheckpoint(t *testing.T) {
	cp := &cpustate.CPUManagerCheckpointV1{PolicyName: "static", DefaultCPUSet: "0-7", Entries: map[string]string{}}
	b, err := cp.MarshalCheckpoint()
	if err != nil {
		t.Fatal(err)
	}
	back := &cpustate.CPUManagerCheckpointV1{}
	if err := back.UnmarshalCheckpoint(b); err != nil {
		t.Fatal(err)
	}
	if err := back.VerifyChecksum(); err == nil {
		t.Errorf("kubelet %s verifies its own V1 MarshalCheckpoint output %s; v1Checkpoint's comment is stale", oracle.KubeletVersion(), b)
	}
}

// TestCPUManagerV1Struct checks that v1Checkpoint's CPUManagerCheckpoint
// dumps as the kubelet's V1 struct does, up to the type's name: the V1
// checksum is computed over that dump.
func TestCPUManagerV1Struct(t *testing.T) {
	entries := map[string]string{"containerd://0123abcd": "2-3", "containerd://4567": "4"}
	kubelet := dump.ForHash(&cpustate.CPUManagerCheckpointV1{PolicyName: "static", DefaultCPUSet: "0-1,5-7", Entries: entries, Checksum: 7})
	ours := dump.ForHash(&CPUManagerCheckpoint{PolicyName: "static", DefaultCPUSet: "0-1,5-7", Entries: entries, Checksum: 7})
	if want, got := strings.Replace(kubelet, "state.CPUManagerCheckpointV1", "T", 1), strings.Replace(ours, "kubeletcompat_test.CPUManagerCheckpoint", "T", 1); got != want {
		t.Errorf("V1 dump differs:\nkubelet %s\nours    %s", want, got)
	}
}
