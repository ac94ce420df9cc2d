package kubeletconfig

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

func TestParse(t *testing.T) {
	const head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	tests := []struct {
		name             string
		in               string
		wantEvictionHard map[string]string
		wantCPUPolicy    string
		wantHealthz      string
		wantErr          string
	}{
		{
			name:             "empty config gets the defaults",
			in:               head,
			wantEvictionHard: DefaultEvictionHard(),
			wantCPUPolicy:    "none",
			wantHealthz:      "127.0.0.1:10248",
		},
		{
			name:             "empty evictionHard turns every threshold off",
			in:               head + "evictionHard: {}\n",
			wantEvictionHard: map[string]string{},
			wantCPUPolicy:    "none",
			wantHealthz:      "127.0.0.1:10248",
		},
		{
			name:             "partial evictionHard is kept as is",
			in:               head + "evictionHard:\n  memory.available: 500Mi\n",
			wantEvictionHard: map[string]string{"memory.available": "500Mi"},
			wantCPUPolicy:    "none",
			wantHealthz:      "127.0.0.1:10248",
		},
		{
			name: "mergeDefaultEvictionSettings fills the missing signals",
			in:   head + "mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: 500Mi\n",
			wantEvictionHard: map[string]string{
				"memory.available": "500Mi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
				"imagefs.available": "15%", "imagefs.inodesFree": "5%",
			},
			wantCPUPolicy: "none",
			wantHealthz:   "127.0.0.1:10248",
		},
		{
			name:             "JSON works too",
			in:               `{"apiVersion":"kubelet.config.k8s.io/v1beta1","kind":"KubeletConfiguration","cpuManagerPolicy":"static","healthzPort":10300,"healthzBindAddress":"0.0.0.0"}`,
			wantEvictionHard: DefaultEvictionHard(),
			wantCPUPolicy:    "static",
			wantHealthz:      "0.0.0.0:10300",
		},
		{
			name:             "unknown fields are ignored like the kubelet's lenient decoder",
			in:               head + "someFutureField: 3\ncpuManagerPolicy: static\n",
			wantEvictionHard: DefaultEvictionHard(),
			wantCPUPolicy:    "static",
			wantHealthz:      "127.0.0.1:10248",
		},
		{
			name:             "field names are case-sensitive",
			in:               head + "CPUManagerPolicy: static\n",
			wantEvictionHard: DefaultEvictionHard(),
			wantCPUPolicy:    "none",
			wantHealthz:      "127.0.0.1:10248",
		},
		{name: "empty file", in: "", wantErr: "empty document"},
		{name: "wrong kind", in: "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: Pod\n", wantErr: `kind "Pod"`},
		{name: "no apiVersion", in: "kind: KubeletConfiguration\n", wantErr: `apiVersion ""`},
		{name: "not YAML", in: "a: [\n", wantErr: "yaml"},
		{name: "wrong type", in: head + "maxPods: many\n", wantErr: "maxPods"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Parse([]byte(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() error: %v", err)
			}
			if diff := cmp.Diff(tt.wantEvictionHard, c.EvictionHard); diff != "" {
				t.Errorf("EvictionHard (-want +got):\n%s", diff)
			}
			if c.CPUManagerPolicy != tt.wantCPUPolicy {
				t.Errorf("CPUManagerPolicy = %q, want %q", c.CPUManagerPolicy, tt.wantCPUPolicy)
			}
			if got := c.HealthzBindAddress + ":" + itoa(int(*c.HealthzPort)); got != tt.wantHealthz {
				t.Errorf("healthz = %q, want %q", got, tt.wantHealthz)
			}
			if c.MemoryManagerPolicy != "None" || c.MaxPods != 110 {
				t.Errorf("MemoryManagerPolicy, MaxPods = %q, %d; want None, 110", c.MemoryManagerPolicy, c.MaxPods)
			}
		})
	}
}

func TestLoadErrorsNameTheFile(t *testing.T) {
	dir := t.TempDir()
	missing := filepath.Join(dir, "missing.yaml")
	if _, err := Load(missing); err == nil || !strings.Contains(err.Error(), "kubeletconfig: read "+missing) {
		t.Errorf("Load(missing) error = %v", err)
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("kind: Pod\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(bad); err == nil || !strings.Contains(err.Error(), "kubeletconfig: parse "+bad) {
		t.Errorf("Load(bad) error = %v", err)
	}
	big := filepath.Join(dir, "big.yaml")
	if err := os.WriteFile(big, make([]byte, maxConfigSize+1), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := Load(big); err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("Load(big) error = %v", err)
	}
}

func TestDefaultHasNoEviction(t *testing.T) {
	// A kubelet without --config has no hard eviction thresholds.
	if c := Default(); c.EvictionHard != nil || c.CPUManagerPolicy != "none" || *c.HealthzPort != 10248 {
		t.Errorf("Default() = evictionHard %v, cpuManagerPolicy %q, healthzPort %d", c.EvictionHard, c.CPUManagerPolicy, *c.HealthzPort)
	}
}

func TestParseDefaultsAreFresh(t *testing.T) {
	in := []byte("apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n")
	a, _ := Parse(in)
	a.EvictionHard["memory.available"] = "1Gi"
	if b, _ := Parse(in); b.EvictionHard["memory.available"] != "100Mi" {
		t.Errorf("Parse() shares its EvictionHard map between calls")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

// TestDefaultEvictionHardEveryRelease: the defaults a loaded file gets are
// the same in every kubelet release hotplugd knows (the release table, each
// row checked against its release's own code by test/kubeletcompat); a
// release that changes them must change this package too.
func TestDefaultEvictionHardEveryRelease(t *testing.T) {
	for _, r := range kubeletversion.Releases() {
		if diff := cmp.Diff(r.EvictionHardDefault(), DefaultEvictionHard()); diff != "" {
			t.Errorf("%s: evictionHard defaults differ (-release +kubeletconfig):\n%s", r, diff)
		}
	}
}
