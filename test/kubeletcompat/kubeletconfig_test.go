package kubeletcompat_test

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// usedFields are the configuration fields hotplugd acts on.
type usedFields struct {
	EvictionHard        map[string]string
	KubeReserved        map[string]string
	SystemReserved      map[string]string
	ReservedSystemCPUs  string
	CPUManagerPolicy    string
	MemoryManagerPolicy string
	HealthzPort         *int32
	HealthzBindAddress  string
	MaxPods             int32
}

func fieldsOf(c *kubeletv1beta1.KubeletConfiguration) usedFields {
	return usedFields{
		EvictionHard:        c.EvictionHard,
		KubeReserved:        c.KubeReserved,
		SystemReserved:      c.SystemReserved,
		ReservedSystemCPUs:  c.ReservedSystemCPUs,
		CPUManagerPolicy:    c.CPUManagerPolicy,
		MemoryManagerPolicy: c.MemoryManagerPolicy,
		HealthzPort:         c.HealthzPort,
		HealthzBindAddress:  c.HealthzBindAddress,
		MaxPods:             c.MaxPods,
	}
}

func TestKubeletConfigLoadMatchesKubelet(t *testing.T) {
	for _, c := range configCases() {
		t.Run(c.name, func(t *testing.T) {
			path := c.path(t)
			kc, kubeletErr := oracle.KubeletConfig(path)

			var got *kubeletv1beta1.KubeletConfiguration
			var loadErr error
			if path == "" {
				got = kubeletconfig.Default()
			} else {
				got, loadErr = kubeletconfig.Load(path)
			}

			switch {
			case c.loadFails:
				if kubeletErr == nil {
					t.Fatalf("the kubelet loads the file; the case expects it not to (oracle broken?)")
				}
				if loadErr == nil {
					t.Errorf("the kubelet cannot load the file (%v), kubeletconfig.Load returns %+v", kubeletErr, fieldsOf(got))
				}
				return
			case kubeletErr != nil:
				// The kubelet loads the file but its validation refuses it;
				// hotplugd may report that later (Allocatable).
				t.Logf("the kubelet refuses the config: %v (kubeletconfig.Load error: %v)", kubeletErr, loadErr)
				return
			case loadErr != nil:
				t.Fatalf("kubeletconfig.Load() error: %v; the kubelet loads the file", loadErr)
			}

			port := kc.HealthzPort
			want := usedFields{
				EvictionHard:        kc.EvictionHard,
				KubeReserved:        kc.KubeReserved,
				SystemReserved:      kc.SystemReserved,
				ReservedSystemCPUs:  kc.ReservedSystemCPUs,
				CPUManagerPolicy:    kc.CPUManagerPolicy,
				MemoryManagerPolicy: kc.MemoryManagerPolicy,
				HealthzPort:         &port,
				HealthzBindAddress:  kc.HealthzBindAddress,
				MaxPods:             kc.MaxPods,
			}
			if diff := cmp.Diff(want, fieldsOf(got), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("configuration differs (-kubelet +hotplugd):\n%s", diff)
			}
		})
	}
}
