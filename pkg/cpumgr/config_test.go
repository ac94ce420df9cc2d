package cpumgr

import (
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
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
		rel     *kubeletversion.Release // nil: 1.36
	}{
		{"defaults: none", func() *kubeletv1beta1.KubeletConfiguration {
			kc := kubelet("")
			kc.CPUManagerPolicy = ""
			return kc
		}(), Config{Policy: PolicyNone}, "", nil},
		{"static", kubelet("2"), Config{Policy: PolicyStatic, Reserved: set("0,4")}, "", nil},
		{"static, strict, gate", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"strict-cpu-reservation": "true", "full-pcpus-only": "true"}
			kc.FeatureGates = map[string]bool{"PodLevelResourceManagers": true}
		}), Config{Policy: PolicyStatic, Reserved: set("0"), StrictReservation: true, PodLevelResourceManagers: true}, "", nil},
		{"strict false", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"strict-cpu-reservation": "false"}
		}), Config{Policy: PolicyStatic, Reserved: set("0")}, "", nil},
		{"bad option value", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"strict-cpu-reservation": "yes"}
		}), Config{}, `bad value for option "strict-cpu-reservation"`, nil},
		{"unknown option", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"pin-harder": "true"}
		}), Config{}, `unknown CPU Manager Policy option: "pin-harder"`, nil},
		{"incompatible options", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"CPUManagerPolicyAlphaOptions": true}
			kc.CPUManagerPolicyOptions = map[string]string{"full-pcpus-only": "true", "distribute-cpus-across-cores": "true"}
		}), Config{}, "can not be used at the same time", nil},
		{"none with options", kubelet("", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicy = PolicyNone
			kc.CPUManagerPolicyOptions = map[string]string{"full-pcpus-only": "true"}
		}), Config{}, "None policy: received unsupported options", nil},
		{"unknown policy", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) { kc.CPUManagerPolicy = "Static" }),
			Config{}, `unknown policy: "Static"`, nil},
		// AllAlpha sets every alpha gate the configuration leaves unset, as
		// the kubelet's feature gate does: PodLevelResourceManagers is alpha
		// in 1.36 and beta (off by default) in 1.37.
		{"AllAlpha, 1.36", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"AllAlpha": true}
		}), Config{Policy: PolicyStatic, Reserved: set("0"), PodLevelResourceManagers: true, InPlaceExclusiveCPUs: true}, "", nil},
		{"AllAlpha, 1.37", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"AllAlpha": true}
		}), Config{Policy: PolicyStatic, Reserved: set("0"), InPlaceExclusiveCPUs: true}, "", kubeletversion.ByMinor(37)},
		{"AllBeta, 1.37", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"AllBeta": true}
		}), Config{Policy: PolicyStatic, Reserved: set("0"), PodLevelResourceManagers: true}, "", kubeletversion.ByMinor(37)},
		// strict-cpu-reservation is beta in 1.34, GA from 1.35.
		{"beta option without its gate, 1.34", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"CPUManagerPolicyBetaOptions": false}
			kc.CPUManagerPolicyOptions = map[string]string{"strict-cpu-reservation": "true"}
		}), Config{}, `Beta-level Options not enabled, but option "strict-cpu-reservation" provided`, kubeletversion.ByMinor(34)},
		{"the same option is GA in 1.35", kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.FeatureGates = map[string]bool{"CPUManagerPolicyBetaOptions": false}
			kc.CPUManagerPolicyOptions = map[string]string{"strict-cpu-reservation": "true"}
		}), Config{Policy: PolicyStatic, Reserved: set("0"), StrictReservation: true}, "", kubeletversion.ByMinor(35)},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			rel := tt.rel
			if rel == nil {
				rel = rel136
			}
			got, err := NewConfig(tt.kc, snap, "/x/cpu_manager_state", rel)
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
			tt.want.Release = rel
			if diff := cmp.Diff(tt.want, got, cmp.Comparer(cpuset.CPUSet.Equals)); diff != "" {
				t.Errorf("unexpected config (-want +got):\n%s", diff)
			}
		})
	}
}
