package memmgr

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

// TestAllocatableIgnoresEviction: under
// --experimental-allocatable-ignore-eviction the node allocatable
// reservation the kubelet's memory manager checks reservedMemory against
// has no hard eviction threshold, so reservedMemory must add up to
// systemReserved + kubeReserved alone. Kubelet v1.36.3's own code gives the
// same in test/kubeletcompat (TestMemoryManagerParityIgnoreEviction).
func TestAllocatableIgnoresEviction(t *testing.T) {
	for _, tc := range []struct {
		name   string
		ignore bool
		config string // after memoryManagerPolicy: Static
		// wantReservation is NodeAllocatableReservation's memory, "" for
		// none.
		wantReservation string
		wantKubelet     string // the kubelet's refusal, "" for a start
		wantErr         bool   // a configuration the kubelet refuses elsewhere
	}{
		{
			name:            "without the flag: systemReserved + the 100Mi default threshold",
			config:          "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n",
			wantReservation: "1Gi",
		},
		{
			name: "without the flag, reservedMemory without the threshold", config: "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 924Mi}}]\n",
			wantReservation: "1Gi",
			wantKubelet:     `the total amount "924Mi" of type "memory" is not equal to the value "1Gi" determined by Node Allocatable feature`,
		},
		{
			name: "with the flag: systemReserved alone", ignore: true,
			config:          "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 924Mi}}]\n",
			wantReservation: "924Mi",
		},
		{
			name: "with the flag, reservedMemory with the threshold", ignore: true,
			config:          "systemReserved: {memory: 924Mi}\nreservedMemory: [{numaNode: 0, limits: {memory: 1Gi}}]\n",
			wantReservation: "924Mi",
			wantKubelet:     `the total amount "1Gi" of type "memory" is not equal to the value "924Mi" determined by Node Allocatable feature`,
		},
		{
			name: "with the flag, a percentage threshold", ignore: true,
			config:          "systemReserved: {memory: 512Mi}\nkubeReserved: {memory: 256Mi}\nevictionHard: {memory.available: 5%}\nreservedMemory: [{numaNode: 0, limits: {memory: 768Mi}}]\n",
			wantReservation: "768Mi",
		},
		{
			name: "with the flag and nothing reserved", ignore: true,
			config:      "reservedMemory: []\n",
			wantKubelet: "[memorymanager] you should specify the system reserved memory",
		},
		{
			name: "with the flag, evictionHard is still checked", ignore: true,
			config:  "systemReserved: {memory: 924Mi}\nevictionHard: {memory.available: -1Gi}\nreservedMemory: [{numaNode: 0, limits: {memory: 924Mi}}]\n",
			wantErr: true,
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := vectorMachine(t, 8)
			kc, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\nmemoryManagerPolicy: Static\n" + tc.config))
			if err != nil {
				t.Fatal(err)
			}
			cfg, err := NewConfigWithFlags(kc, KubeletFlags{AllocatableIgnoresEviction: tc.ignore}, s, "", kubeletversion.ByMinor(36))
			if (err != nil) != tc.wantErr {
				t.Fatalf("NewConfigWithFlags: %v, want an error: %v", err, tc.wantErr)
			}
			if err != nil {
				return
			}
			var got string
			if q, ok := cfg.NodeAllocatableReservation[v1.ResourceMemory]; ok {
				got = q.String()
			}
			if diff := cmp.Diff(tc.wantReservation, got); diff != "" {
				t.Errorf("unexpected node allocatable memory reservation (-want +got):\n%s", diff)
			}
			_, err = New(s, cfg)
			if msg := kubeletMessage(t, err); msg != tc.wantKubelet {
				t.Errorf("New: the kubelet would say %q, want %q", msg, tc.wantKubelet)
			}
		})
	}
}
