package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"

	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// TestIntegrationPruneAtRemoval: --prune-on-removal=daemonset/NS/NAME
// against the real API server. A SIGTERM while the DaemonSet remains (an
// update, a drain) leaves the condition and annotations for the next
// hotplugd; a SIGTERM once the DaemonSet is deleted, with background
// propagation (gone) or foreground (kept with a deletion timestamp until
// its pods are gone), removes them before hotplugd exits. Where hotplugd
// cannot tell (no systemd to ask), it leaves them and says so.
func TestIntegrationPruneAtRemoval(t *testing.T) {
	srv := sharedAPIServer(t)
	c := srv.Client()
	ctx := context.Background()
	cfg := kubeletConfig(t)
	capacity, allocatable := machineStatus(t, cfg)
	kubeconfig := kubeconfigFor(t, srv)
	ns := fmt.Sprintf("removal-%d", os.Getpid())
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}) })

	start := func(node string, prune string) *daemonProc {
		t.Helper()
		d := startClusterDaemon(t, "--node-name", node, "--kubeconfig", kubeconfig, "--kubelet-config", cfg,
			"--kubelet-root-dir", t.TempDir(), "--resync", "0", "--prune-on-removal", prune)
		waitCondition(t, c, node, v1.ConditionFalse, 10*time.Second)
		return d
	}
	stopped := func(d *daemonProc, node string, wantPruned bool, wantLog string) {
		t.Helper()
		d.Stop()
		if !strings.Contains(d.Dump(), wantLog) {
			t.Errorf("hotplugd's log lacks %q:\n%s", wantLog, d.Dump())
		}
		cond, n := condition(t, c, node)
		owned := nodepatch.OwnedBy(n)
		if wantPruned && (!owned.Empty() || cond != nil) {
			t.Errorf("after the removal the Node still carries %+v", owned)
		}
		if !wantPruned && (cond == nil || len(owned.Annotations) == 0) {
			t.Errorf("after a stop that is not a removal the Node carries %+v, want the condition and annotations kept", owned)
		}
	}

	t.Run("DaemonSet remains", func(t *testing.T) {
		ds := createDaemonSet(t, c, ns, "remains")
		node := createNode(t, c, "removal", capacity, allocatable)
		d := start(node, "daemonset/"+ns+"/"+ds)
		stopped(d, node, false, "not a removal")
	})
	t.Run("DaemonSet deleted", func(t *testing.T) {
		ds := createDaemonSet(t, c, ns, "background")
		node := createNode(t, c, "removal", capacity, allocatable)
		d := start(node, "daemonset/"+ns+"/"+ds)
		background := metav1.DeletePropagationBackground
		if err := c.AppsV1().DaemonSets(ns).Delete(ctx, ds, metav1.DeleteOptions{PropagationPolicy: &background}); err != nil {
			t.Fatal(err)
		}
		stopped(d, node, true, "is gone")
	})
	t.Run("DaemonSet being deleted", func(t *testing.T) {
		ds := createDaemonSet(t, c, ns, "foreground")
		node := createNode(t, c, "removal", capacity, allocatable)
		d := start(node, "daemonset/"+ns+"/"+ds)
		foreground := metav1.DeletePropagationForeground
		if err := c.AppsV1().DaemonSets(ns).Delete(ctx, ds, metav1.DeleteOptions{PropagationPolicy: &foreground}); err != nil {
			t.Fatal(err)
		}
		// No garbage collector here: the DaemonSet stays, deleting, until
		// its foregroundDeletion finalizer is removed (below).
		t.Cleanup(func() {
			c.AppsV1().DaemonSets(ns).Patch(ctx, ds, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		})
		stopped(d, node, true, "is being deleted")
	})
	t.Run("cannot tell", func(t *testing.T) {
		t.Setenv("DBUS_SYSTEM_BUS_ADDRESS", "unix:path="+t.TempDir()+"/no-bus")
		node := createNode(t, c, "removal", capacity, allocatable)
		d := start(node, "systemd/hotplugd.service")
		stopped(d, node, false, "cannot tell whether hotplugd is being removed")
	})
}

// createDaemonSet creates a DaemonSet whose name starts with prefix (no
// controller runs it here: it is only looked at).
func createDaemonSet(t *testing.T, c kubernetes.Interface, ns, prefix string) string {
	t.Helper()
	labels := map[string]string{"app": prefix}
	ds := &appsv1.DaemonSet{
		ObjectMeta: metav1.ObjectMeta{GenerateName: prefix + "-", Namespace: ns},
		Spec: appsv1.DaemonSetSpec{
			Selector: &metav1.LabelSelector{MatchLabels: labels},
			Template: v1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       v1.PodSpec{Containers: []v1.Container{{Name: "c", Image: "example.com/hotplugd"}}},
			},
		},
	}
	got, err := c.AppsV1().DaemonSets(ns).Create(context.Background(), ds, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return got.Name
}
