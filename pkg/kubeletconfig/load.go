package kubeletconfig

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

const (
	// APIVersion is the only KubeletConfiguration version kubelets accept.
	APIVersion = "kubelet.config.k8s.io/v1beta1"
	// Kind is the KubeletConfiguration kind.
	Kind = "KubeletConfiguration"
	// maxConfigSize bounds the file read; real configurations are a few KiB.
	maxConfigSize = 4 << 20
)

// DefaultEvictionHard is the kubelet's hard eviction default on Linux
// (pkg/kubelet/eviction/defaults_linux.go), used when a loaded configuration
// file sets no evictionHard at all. It is the same in every release hotplugd
// knows (kubeletversion.Release.EvictionHard, 1.34 to 1.37; a test keeps the
// two equal), so it is applied before the kubelet's version is known.
func DefaultEvictionHard() map[string]string {
	return map[string]string{
		"memory.available":   "100Mi",
		"nodefs.available":   "10%",
		"nodefs.inodesFree":  "5%",
		"imagefs.available":  "15%",
		"imagefs.inodesFree": "5%",
	}
}

// Default returns the configuration of a kubelet started without a config
// file: every field hotplugd uses at the kubelet's default. Such a kubelet has
// no hard eviction thresholds at all: the kubelet applies
// DefaultEvictionHard only while loading a --config file.
func Default() *kubeletv1beta1.KubeletConfiguration {
	c := &kubeletv1beta1.KubeletConfiguration{
		TypeMeta: metav1.TypeMeta{APIVersion: APIVersion, Kind: Kind},
	}
	setDefaults(c, false)
	return c
}

// Load reads a KubeletConfiguration file and applies the kubelet's defaults
// (see Default). Unknown fields are ignored, as the kubelet's lenient decoder
// does; a file that is not a v1beta1 KubeletConfiguration is an error.
func Load(path string) (*kubeletv1beta1.KubeletConfiguration, error) {
	b, err := readCapped(path)
	if err != nil {
		return nil, fmt.Errorf("kubeletconfig: read %s: %w", path, err)
	}
	c, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("kubeletconfig: parse %s: %w", path, err)
	}
	return c, nil
}

// Parse decodes a KubeletConfiguration document (YAML or JSON) and applies
// the kubelet's defaults.
func Parse(b []byte) (*kubeletv1beta1.KubeletConfiguration, error) {
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, err
	}
	if bytes.Equal(bytes.TrimSpace(j), []byte("null")) {
		return nil, fmt.Errorf("empty document, want apiVersion %s and kind %s", APIVersion, Kind)
	}
	c := &kubeletv1beta1.KubeletConfiguration{}
	// Field names are case-sensitive, as in the kubelet's decoder.
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(j, c); err != nil {
		return nil, err
	}
	if c.APIVersion != APIVersion || c.Kind != Kind {
		return nil, fmt.Errorf("apiVersion %q kind %q, want apiVersion %s and kind %s", c.APIVersion, c.Kind, APIVersion, Kind)
	}
	setDefaults(c, true)
	return c, nil
}

// setDefaults applies the kubelet's defaults (pkg/kubelet/apis/config/v1beta1
// and, for a config file, cmd/kubelet/app/server.go's loadConfigFile) to the
// fields hotplugd reads.
func setDefaults(c *kubeletv1beta1.KubeletConfiguration, fromFile bool) {
	if c.MergeDefaultEvictionSettings == nil {
		c.MergeDefaultEvictionSettings = ptr.To(false)
	}
	// The kubelet defaults evictionHard only when the file has none at all
	// (an empty map turns every threshold off); a partial map replaces the
	// defaults unless mergeDefaultEvictionSettings.
	if !fromFile {
		// no file: no thresholds
	} else if c.EvictionHard == nil {
		c.EvictionHard = DefaultEvictionHard()
	} else if *c.MergeDefaultEvictionSettings {
		for k, v := range DefaultEvictionHard() {
			if _, ok := c.EvictionHard[k]; !ok {
				c.EvictionHard[k] = v
			}
		}
	}
	if c.CPUManagerPolicy == "" {
		c.CPUManagerPolicy = "none"
	}
	if c.MemoryManagerPolicy == "" {
		c.MemoryManagerPolicy = kubeletv1beta1.NoneMemoryManagerPolicy
	}
	if c.TopologyManagerPolicy == "" {
		c.TopologyManagerPolicy = kubeletv1beta1.NoneTopologyManagerPolicy
	}
	if c.HealthzPort == nil {
		c.HealthzPort = ptr.To[int32](10248)
	}
	if c.HealthzBindAddress == "" {
		c.HealthzBindAddress = "127.0.0.1"
	}
	if c.MaxPods == 0 {
		c.MaxPods = 110
	}
	if c.NodeStatusUpdateFrequency.Duration == 0 {
		c.NodeStatusUpdateFrequency = metav1.Duration{Duration: 10 * time.Second}
	}
	if c.CgroupDriver == "" {
		c.CgroupDriver = "cgroupfs"
	}
	if c.EnforceNodeAllocatable == nil {
		c.EnforceNodeAllocatable = []string{"pods"}
	}
}

func readCapped(path string) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return readAllCapped(f)
}

// readAllCapped reads r to its end without trusting a size from stat (proc
// files report 0), refusing more than maxConfigSize bytes.
func readAllCapped(r io.Reader) ([]byte, error) {
	b, err := io.ReadAll(io.LimitReader(r, maxConfigSize+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxConfigSize {
		return nil, fmt.Errorf("larger than %d bytes", maxConfigSize)
	}
	return b, nil
}
