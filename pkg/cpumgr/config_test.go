package cpumgr

import (
	"errors"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"

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

// TestNewConfigRefusals: a configuration the kubelet refuses is a
// *ConfigError with the kubelet's words (as cpumanager.NewManager and
// getReservedCPUs return them); one hotplugd cannot predict is
// ErrCannotPredict, not a refusal.
func TestNewConfigRefusals(t *testing.T) {
	alignBySocket := func(kc *kubeletv1beta1.KubeletConfiguration) {
		kc.FeatureGates = map[string]bool{"CPUManagerPolicyAlphaOptions": true}
		kc.CPUManagerPolicyOptions = map[string]string{"align-by-socket": "true"}
	}
	// Two sockets in one NUMA node.
	twoSockets := fixturegen.Machine{Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1, Nodes: []fixturegen.Node{{CPUs: fixturegen.CPUs(0, 3), MemTotalKB: 8 << 20}}}
	for _, tt := range []struct {
		name    string
		m       fixturegen.Machine
		kc      *kubeletv1beta1.KubeletConfiguration
		kubelet string // the ConfigError's words; "" for none
		predict bool   // ErrCannotPredict
	}{
		{"no cpu reservation", machine(4, 1), kubelet(""), "[cpumanager] unable to determine reserved CPU resources for static policy", false},
		{"none with options", machine(4, 1), kubelet("", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicy = PolicyNone
			kc.CPUManagerPolicyOptions = map[string]string{"full-pcpus-only": "true"}
		}), "new none policy error: None policy: received unsupported options=map[full-pcpus-only:true]", false},
		{"unknown option", machine(4, 1), kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"pin-harder": "true"}
		}), `new static policy error: unknown CPU Manager Policy option: "pin-harder"`, false},
		{"reserved CPU offline", machine(4, 1, 3), kubelet("", func(kc *kubeletv1beta1.KubeletConfiguration) { kc.ReservedSystemCPUs = "3" }),
			"reserved-cpus: 3 is not a subset of online-cpus: 0-2", false},
		{"more than there are", machine(2, 1), kubelet("3"), "new static policy error: [cpumanager] unable to reserve the required amount of CPUs (size of  did not equal 3)", false},
		{"align-by-socket, single-numa-node", machine(4, 1), kubelet("1", alignBySocket, func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.TopologyManagerPolicy = "single-numa-node"
		}), "new static policy error: Topolgy manager single-numa-node policy is incompatible with CPUManager align-by-socket policy option", false},
		{"align-by-socket, more sockets than NUMA nodes", twoSockets, kubelet("1", alignBySocket),
			"new static policy error: Align by socket is not compatible with hardware where number of sockets are more than number of NUMA", false},
		{"align-by-socket, one socket", machine(4, 1), kubelet("1", alignBySocket), "", false},
		{"distribute-cpus-across-numa", machine(4, 1), kubelet("1", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.CPUManagerPolicyOptions = map[string]string{"distribute-cpus-across-numa": "true"}
		}), "", true},
		{"distribute-cpus-across-numa with reservedSystemCPUs", machine(4, 1), kubelet("", func(kc *kubeletv1beta1.KubeletConfiguration) {
			kc.ReservedSystemCPUs = "0"
			kc.CPUManagerPolicyOptions = map[string]string{"distribute-cpus-across-numa": "true"}
		}), "", false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := NewConfig(tt.kc, snapshot(t, tt.m), "", rel136)
			var ce *ConfigError
			switch {
			case tt.kubelet != "":
				if !errors.As(err, &ce) || ce.Kubelet != tt.kubelet || !errors.Is(err, ErrConfig) {
					t.Fatalf("NewConfig() error = %v, want the kubelet's %q", err, tt.kubelet)
				}
			case tt.predict:
				if !errors.Is(err, ErrCannotPredict) || errors.Is(err, ErrConfig) {
					t.Fatalf("NewConfig() error = %v, want ErrCannotPredict", err)
				}
			case err != nil:
				t.Fatalf("NewConfig() error: %v", err)
			}
		})
	}
}
