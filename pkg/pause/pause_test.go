package pause

import (
	"context"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hotplugd/hotplugd/internal/kubeclienttest"
)

// TestWatch follows the annotation on and off (a fake clientset: the real
// API server's watch is test/integration's TestIntegrationClusterPause).
func TestWatch(t *testing.T) {
	// The fake clientset cannot stream a list over a watch (client-go's
	// WatchListClient, on by default): the reflector lists, as it does
	// against an API server without it.
	t.Setenv("KUBE_FEATURE_WatchListClient", "false")
	ds := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "hotplugd",
		Annotations: map[string]string{Annotation: "node pool upgrade"}}}
	c := fake.NewClientset(ds)
	w := NewWatch(kubeclienttest.Clientset(c), "ns", "hotplugd", nil)
	if got := w.Paused(); got != "" {
		t.Errorf("before the first list: %q, want not paused", got)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	done := make(chan error, 1)
	go func() { done <- w.Run(ctx) }()
	until := func(want func(string) bool) string {
		t.Helper()
		for {
			ch := w.Changed()
			if got := w.Paused(); want(got) {
				return got
			}
			select {
			case <-ch:
			case <-time.After(10 * time.Second):
				t.Fatalf("no change within 10 s; paused %q", w.Paused())
			}
		}
	}
	got := until(func(s string) bool { return s != "" })
	if !strings.Contains(got, `"node pool upgrade"`) || !strings.Contains(got, "ns/hotplugd") {
		t.Errorf("paused: %q", got)
	}
	ds = ds.DeepCopy()
	ds.Annotations = nil
	if _, err := c.AppsV1().DaemonSets("ns").Update(ctx, ds, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	until(func(s string) bool { return s == "" })
	cancel()
	if err := <-done; err != nil {
		t.Error(err)
	}
}
