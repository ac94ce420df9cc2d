package topology_test

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
)

// TestAllocatable checks the kubelet's allocatable formula on the
// dual-socket fixture: 16 CPUs, MemTotal 131006464 kB (127936Mi),
// hugepages 768 x 2Mi (1536Mi) and 6 x 1Gi. The kubelet's own code gives the
// same values in test/kubeletcompat.
func TestAllocatable(t *testing.T) {
	tests := []struct {
		name    string
		config  string // KubeletConfiguration body after apiVersion/kind
		want    map[string]string
		wantErr string
	}{
		{
			name: "defaults: 100Mi eviction, hugepages out of memory",
			want: map[string]string{"cpu": "16", "memory": "120156Mi"},
		},
		{
			name:   "empty evictionHard: no thresholds",
			config: "evictionHard: {}\n",
			want:   map[string]string{"cpu": "16", "memory": "120256Mi"},
		},
		{
			name:   "kube and system reserved",
			config: "kubeReserved: {cpu: 100m, memory: 256Mi}\nsystemReserved: {cpu: 500m, memory: 1Gi}\n",
			// 127936Mi - 256Mi - 1Gi - 100Mi - 1536Mi - 6Gi
			want: map[string]string{"cpu": "15400m", "memory": "118876Mi"},
		},
		{
			name:   "percentage eviction is float32 arithmetic on bytes",
			config: "evictionHard: {memory.available: 7.3%}\n",
			// float32(7.3)/100 = 0.0729999989..., so the threshold is
			// int64(134150619136 * 0.0729999989) = 9792995053 bytes, 143
			// bytes less than exact 7.3%; minus 1536Mi and 6Gi of hugepages.
			want: map[string]string{"cpu": "16", "memory": "116304560403"},
		},
		{
			name:   "partial evictionHard replaces the defaults: no memory threshold",
			config: "evictionHard: {nodefs.available: 5%}\n",
			want:   map[string]string{"cpu": "16", "memory": "120256Mi"},
		},
		{
			name:   "mergeDefaultEvictionSettings brings memory.available back",
			config: "mergeDefaultEvictionSettings: true\nevictionHard: {nodefs.available: 5%}\n",
			want:   map[string]string{"cpu": "16", "memory": "120156Mi"},
		},
		{
			name:   "0% is ignored",
			config: "evictionHard: {memory.available: 0%}\n",
			want:   map[string]string{"cpu": "16", "memory": "120256Mi"},
		},
		{
			name:   "reservedSystemCPUs replaces the cpu reservations",
			config: "reservedSystemCPUs: 0,8\nkubeReserved: {cpu: '1'}\nsystemReserved: {cpu: 500m}\n",
			want:   map[string]string{"cpu": "14", "memory": "120156Mi"},
		},
		{
			name:   "hugepages push allocatable memory to the clamp at zero",
			config: "systemReserved: {memory: 120200Mi}\n",
			want:   map[string]string{"cpu": "16", "memory": "0"},
		},
		{
			name:    "reservations above capacity: the kubelet refuses to start",
			config:  "systemReserved: {cpu: '64', memory: 200Gi}\n",
			wantErr: `the kubelet would refuse to start: resource "cpu" has a reservation of 64 but capacity of 16; resource "memory" has a reservation of 204900Mi but capacity of 127936Mi`,
		},
		{
			name:    "reservedSystemCPUs outside the online CPUs",
			config:  "reservedSystemCPUs: 0,31\n",
			wantErr: "reservedSystemCPUs 0,31 is not a subset of the online CPUs 0-15",
		},
		{
			name:    "negative reservation",
			config:  "kubeReserved: {memory: -1Gi}\n",
			wantErr: `kubeReserved: resource quantity for "memory" cannot be negative`,
		},
		{
			name:    "unsupported reservation",
			config:  "systemReserved: {hugepages-2Mi: 1Gi}\n",
			wantErr: `systemReserved: cannot reserve "hugepages-2Mi" resource`,
		},
		{
			name:    "unknown eviction signal",
			config:  "evictionHard: {memory.free: 1Gi}\n",
			wantErr: "unsupported eviction signal memory.free",
		},
		{
			name:    "percentage above 100",
			config:  "evictionHard: {memory.available: 120%}\n",
			wantErr: "must be between 0% and 100%",
		},
	}
	snap, err := extractFixture(t, "dual-socket-smt2").Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + tt.config))
			if err != nil {
				t.Fatalf("kubeletconfig.Parse() error: %v", err)
			}
			alloc, err := snap.Allocatable(cfg)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Allocatable() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Allocatable() error: %v", err)
			}
			got := map[string]string{}
			for k, v := range alloc {
				if k == "cpu" || k == "memory" {
					got[string(k)] = v.String()
				}
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("unexpected allocatable (-want +got):\n%s", diff)
			}
			// Hugepages are never reserved.
			if a, c := alloc["hugepages-2Mi"], snap.Capacity()["hugepages-2Mi"]; a.Cmp(c) != 0 {
				t.Errorf("allocatable hugepages-2Mi = %s, want capacity %s", a.String(), c.String())
			}
		})
	}
}

// TestAllocatableIgnoringEviction: a kubelet with
// --experimental-allocatable-ignore-eviction holds back no hard eviction
// threshold, and still refuses an evictionHard statement it cannot parse.
func TestAllocatableIgnoringEviction(t *testing.T) {
	snap, err := extractFixture(t, "dual-socket-smt2").Snapshot()
	if err != nil {
		t.Fatal(err)
	}
	parse := func(body string) *kubeletv1beta1.KubeletConfiguration {
		cfg, err := kubeletconfig.Parse([]byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n" + body))
		if err != nil {
			t.Fatal(err)
		}
		return cfg
	}
	cfg := parse("evictionHard: {memory.available: 1Gi}\nkubeReserved: {memory: 256Mi}\n")
	with, err := snap.Allocatable(cfg)
	if err != nil {
		t.Fatal(err)
	}
	without, err := snap.AllocatableIgnoringEviction(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// 127936Mi - 256Mi - 1536Mi - 6Gi, and 1Gi less with eviction.
	if got := map[string]string{"with": with.Memory().String(), "ignoring": without.Memory().String()}; !cmp.Equal(got, map[string]string{"with": "118976Mi", "ignoring": "120000Mi"}) {
		t.Errorf("allocatable memory %v", got)
	}
	bad := parse("evictionHard: {memory.available: lots}\n")
	if _, err := snap.AllocatableIgnoringEviction(bad); err == nil {
		t.Error("an evictionHard the kubelet cannot parse is accepted when eviction is ignored")
	}
}
