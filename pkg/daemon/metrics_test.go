package daemon

import (
	"runtime"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus/testutil"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// TestMetricConventions: hotplugd_build_info, and hotplugd_capacity with
// kube-state-metrics' unit label for each resource kind.
func TestMetricConventions(t *testing.T) {
	m := NewMetrics()
	if err := m.RegisterBuildInfo("v1.2.3"); err != nil {
		t.Fatal(err)
	}
	m.setCapacity(v1.ResourceList{
		v1.ResourceCPU: resource.MustParse("2"), v1.ResourceMemory: resource.MustParse("1Gi"),
		"hugepages-2Mi": resource.MustParse("4Mi"),
	})
	want := `
# HELP hotplugd_build_info 1, labelled with hotplugd's version and the Go release it was built with.
# TYPE hotplugd_build_info gauge
hotplugd_build_info{goversion="` + runtime.Version() + `",version="v1.2.3"} 1
# HELP hotplugd_capacity Capacity a freshly started kubelet would report, by resource and unit (core for cpu, byte for memory and hugepages: the labels of kube-state-metrics' kube_node_status_capacity).
# TYPE hotplugd_capacity gauge
hotplugd_capacity{resource="cpu",unit="core"} 2
hotplugd_capacity{resource="hugepages-2Mi",unit="byte"} 4.194304e+06
hotplugd_capacity{resource="memory",unit="byte"} 1.073741824e+09
`
	if err := testutil.GatherAndCompare(m.Registry, strings.NewReader(want), "hotplugd_build_info", "hotplugd_capacity"); err != nil {
		t.Error(err)
	}
	for name, unit := range map[v1.ResourceName]string{"pods": "integer", "ephemeral-storage": "byte", "hugepages-1Gi": "byte"} {
		if got := Unit(name); got != unit {
			t.Errorf("Unit(%s) = %s, want %s", name, got, unit)
		}
	}
}
