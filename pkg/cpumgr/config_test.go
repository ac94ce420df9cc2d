package cpumgr

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/cpuset"
)

func TestNewConfig(t *testing.T) {
	snap := snapshot(t, machine(4, 2))
	tests := []struct {
		name    string
		kc      *kubeletv1beta1.KubeletConfiguration
		want    Config
		wantErr string
	}{
		{"defaults: none", func() *kubeletv1beta1.KubeletConfiguration {
			kc := kubelet("")
			kc.CPUManagerPolicy = ""
			return kc
		}(), Config{Policy: PolicyNone}, ""},
		{"static", kubelet("2"), Config{Policy: PolicyStatic, Reserved: set("0,4")}, ""},
		{"static, strict, gate", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"strict-cpu-reservation": "true", "full-pcpus-only": "true"}
			kc.FeatureGates = map[string]bool{"PodLevelResourceManagers": true}
		}), Config{Policy: PolicyStatic, Reserved: set("0"), StrictReservation: true, PodLevelResourceManagers: true}, ""},
		{"strict false", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"strict-cpu-reservation": "false"}
		}), Config{Policy: PolicyStatic, Reserved: set("0")}, ""},
		{"bad option value", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"strict-cpu-reservation": "yes"}
		}), Config{}, `bad value for option "strict-cpu-reservation"`},
		{"unknown option", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"pin-harder": "true"}
		}), Config{}, `unknown CPU Manager Policy option: "pin-harder"`},
		{"incompatible options", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"CPUManagerPolicyAlphaOptions": true}
			kc.CPUManagerPolicyOptions = map[string]string{"full-pcpus-only": "true", "distribute-cpus-across-cores": "true"}
		}), Config{}, "can not be used at the same time"},
		{"none with options", kubelet("", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicy = PolicyNone
			kc.CPUManagerPolicyOptions = map[string]string{"full-pcpus-only": "true"}
		}), Config{}, "None policy: received unsupported options"},
		{"unknown policy", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) { kc.CPUManagerPolicy = "Static" }),
			Config{}, `unknown policy: "Static"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := NewConfig(tt.kc, snap, "/x/cpu_manager_state")
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("NewConfig() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			tt.want.Path = "/x/cpu_manager_state"
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(cpuset.CPUSet.Equals)); diff != "" {
				t.Errorf("unexpected config (-want +got):\n%s", diff)
			}
		})
	}
}
