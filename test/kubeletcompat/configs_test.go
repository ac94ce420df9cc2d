package kubeletcompat_test

import (
	"os"
	"path/filepath"
	"testing"
)

const header = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// configCase is a KubeletConfiguration file, shared by the allocatable and
// the config loading tests.
type configCase struct {
	name string
	// noFile is a kubelet started without --config.
	noFile bool
	// yaml is the file's content.
	yaml string
	// kubeletRefuses is true when the kubelet does not start with this
	// config on any machine used here (it fails loading, validation,
	// reservation parsing or the container manager's allocatable check).
	// It keeps the oracle honest: a broken oracle erroring everywhere would
	// otherwise pass.
	kubeletRefuses bool
	// loadFails is true when the kubelet cannot even load the file (so
	// kubeletconfig.Load must fail too).
	loadFails bool
}

func configCases() []configCase {
	return []configCase{
		{name: "no config file", noFile: true},
		{name: "empty config", yaml: header},
		{name: "kubeReserved", yaml: header + "kubeReserved:\n  cpu: 100m\n  memory: 256Mi\n"},
		{name: "systemReserved and kubeReserved", yaml: header +
			"systemReserved:\n  cpu: 500m\n  memory: 1Gi\nkubeReserved:\n  cpu: 100m\n  memory: 256Mi\n"},
		{name: "evictionHard 5%", yaml: header + "evictionHard:\n  memory.available: \"5%\"\n"},
		// 7.3 is not exact in float32: the kubelet's float32 percentage
		// times capacity, truncated, gives a byte count that is no
		// whole number of Ki.
		{name: "evictionHard 7.3%", yaml: header + "evictionHard:\n  memory.available: \"7.3%\"\n"},
		{name: "evictionHard 10.55% and nodefs", yaml: header + "evictionHard:\n  memory.available: \"10.55%\"\n  nodefs.available: \"5%\"\n"},
		// A partial evictionHard replaces the defaults: no memory threshold.
		{name: "evictionHard nodefs only", yaml: header + "evictionHard:\n  nodefs.available: \"10%\"\n"},
		{name: "evictionHard nodefs only merged with defaults", yaml: header +
			"mergeDefaultEvictionSettings: true\nevictionHard:\n  nodefs.available: \"10%\"\n"},
		{name: "evictionHard memory merged with defaults", yaml: header +
			"mergeDefaultEvictionSettings: true\nevictionHard:\n  memory.available: \"500Mi\"\n"},
		{name: "evictionHard empty map", yaml: header + "evictionHard: {}\n"},
		// The kubelet ignores 0% and 100% thresholds.
		{name: "evictionHard 0%", yaml: header + "evictionHard:\n  memory.available: \"0%\"\n"},
		{name: "evictionHard 100%", yaml: header + "evictionHard:\n  memory.available: \"100%\"\n"},
		{name: "evictionHard 0.0%", yaml: header + "evictionHard:\n  memory.available: \"0.0%\"\n"},
		{name: "evictionHard 1.5Gi", yaml: header + "evictionHard:\n  memory.available: 1.5Gi\n"},
		{name: "evictionHard odd bytes", yaml: header + "evictionHard:\n  memory.available: \"123456789\"\n"},
		{name: "evictionHard decimal SI", yaml: header + "evictionHard:\n  memory.available: 1G\n"},
		{name: "evictionHard zero quantity", yaml: header + "evictionHard:\n  memory.available: \"0\"\n", kubeletRefuses: true},
		{name: "evictionHard negative percentage", yaml: header + "evictionHard:\n  memory.available: \"-5%\"\n", kubeletRefuses: true},
		{name: "evictionHard over 100%", yaml: header + "evictionHard:\n  memory.available: \"150%\"\n", kubeletRefuses: true},
		{name: "evictionHard unknown signal", yaml: header + "evictionHard:\n  foo.available: 1Gi\n", kubeletRefuses: true},
		{name: "evictionHard soft-only signal", yaml: header + "evictionHard:\n  allocatableMemory.available: 1Gi\n"},
		{name: "reservedSystemCPUs overrides cpu reservations", yaml: header +
			"reservedSystemCPUs: \"0\"\nkubeReserved:\n  cpu: \"1\"\n  memory: 100Mi\n"},
		{name: "reservedSystemCPUs replaces systemReserved cpu", yaml: header +
			"reservedSystemCPUs: \"0\"\nsystemReserved:\n  cpu: 300m\n  memory: 200Mi\n"},
		{name: "reservedSystemCPUs not online", yaml: header + "reservedSystemCPUs: \"4095\"\n", kubeletRefuses: true},
		{name: "reservedSystemCPUs unparsable", yaml: header + "reservedSystemCPUs: \"x\"\n", kubeletRefuses: true},
		{name: "negative reservation", yaml: header + "kubeReserved:\n  memory: -1Gi\n", kubeletRefuses: true},
		{name: "cpu reservation above capacity", yaml: header + "kubeReserved:\n  cpu: \"100000\"\n", kubeletRefuses: true},
		{name: "memory reservation above capacity", yaml: header + "systemReserved:\n  memory: 1Pi\n", kubeletRefuses: true},
		{name: "hugepages reservation", yaml: header + "kubeReserved:\n  hugepages-2Mi: 1Gi\n", kubeletRefuses: true},
		{name: "fractional cpu and decimal memory", yaml: header + "kubeReserved:\n  cpu: \"0.25\"\n  memory: 1G\nsystemReserved:\n  cpu: 1500m\n  memory: \"1000000\"\n"},
		// A milli-byte reservation: the kubelet keeps it, in milli units.
		{name: "milli memory reservation", yaml: header + "kubeReserved:\n  memory: 100m\n"},
		{name: "pid and ephemeral-storage reservations", yaml: header +
			"kubeReserved:\n  pid: \"1000\"\n  ephemeral-storage: 1Gi\n  memory: 64Mi\n"},
		{name: "cpu and memory manager settings", yaml: header +
			"cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\nmemoryManagerPolicy: Static\n" +
			"reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1124Mi\n" +
			"kubeReserved:\n  memory: 1Gi\nmaxPods: 250\npodsPerCore: 4\nhealthzPort: 0\nhealthzBindAddress: 0.0.0.0\n"},
		{name: "healthz and maxPods", yaml: header + "healthzPort: 10348\nhealthzBindAddress: \"::1\"\nmaxPods: 64\n"},
		{name: "json", yaml: `{"apiVersion": "kubelet.config.k8s.io/v1beta1", "kind": "KubeletConfiguration", "kubeReserved": {"memory": "512Mi"}}`},
		// Strict decoding fails, the kubelet falls back to lenient decoding.
		{name: "unknown field", yaml: header + "fooBar: 1\nkubeReserved:\n  memory: 128Mi\n"},
		{name: "field name in the wrong case", yaml: header + "KubeReserved:\n  memory: 128Mi\n"},
		{name: "wrong apiVersion", yaml: "apiVersion: kubelet.config.k8s.io/v1alpha0\nkind: KubeletConfiguration\n", kubeletRefuses: true, loadFails: true},
		{name: "empty file", yaml: "", kubeletRefuses: true, loadFails: true},
		{name: "not yaml", yaml: "kubeReserved: [\n", kubeletRefuses: true, loadFails: true},
	}
}

// path writes the case's file into a fresh directory and returns its path,
// or "" for a kubelet without a config file.
func (c configCase) path(t *testing.T) string {
	t.Helper()
	if c.noFile {
		return ""
	}
	p := filepath.Join(t.TempDir(), "kubelet-config.yaml")
	if err := os.WriteFile(p, []byte(c.yaml), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}
