package allocated_test

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/hotplugd/hotplugd/internal/kubeletstate"
	"github.com/hotplugd/hotplugd/pkg/allocated"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

// A remedy about to restart a kubelet 1.36 whose node lost a CPU: read the
// checkpoint, keep the pods that run (podcgroups.Running gives them; here
// all but one), and judge the new allocatable.
func Example() {
	root, _ := os.MkdirTemp("", "kubelet")
	defer os.RemoveAll(root)
	b, _ := os.ReadFile("testdata/kubelet-1.36.allocated_pods_state")
	os.WriteFile(filepath.Join(root, allocated.FileName), b, 0o600)

	cp, err := allocated.Read(root, kubeletversion.ByMinor(36), nil)
	switch {
	case errors.Is(err, allocated.ErrNotExist), errors.Is(err, allocated.ErrGateOff):
		fmt.Println("cannot judge:", err)
		return
	case err != nil:
		fmt.Println("refuse to restart:", err)
		return
	}
	running := map[string]bool{
		"11111111-aaaa-4000-8000-000000000001": true,
		"22222222-bbbb-4000-8000-000000000002": true,
		"44444444-dddd-4000-8000-000000000004": true,
	}
	pods, gone := allocated.KeepRunning(cp.Pods, running)
	fmt.Println("not running:", gone)
	r := allocated.Shortfall(v1.ResourceList{
		v1.ResourceCPU:    resource.MustParse("1"),
		v1.ResourceMemory: resource.MustParse("8Gi"),
		v1.ResourcePods:   resource.MustParse("110"),
	}, pods)
	fmt.Println(r.Fits())
	fmt.Println(r.Describe(kubeletstate.PodNames{"11111111-aaaa-4000-8000-000000000001": "default/web-0"}))
	// Output:
	// not running: [33333333-cccc-4000-8000-000000000003 55555555-eeee-4000-8000-000000000005]
	// false
	// cpu: pods request 2300m, the restarted kubelet would allow 1: it would reject at least one of default/web-0, uid 22222222-bbbb-4000-8000-000000000002, uid 44444444-dddd-4000-8000-000000000004 (it admits them oldest first, and allocated_pods_state does not say which is oldest): drain some of them
}
