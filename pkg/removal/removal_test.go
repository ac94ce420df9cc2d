package removal

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/hotplugd/hotplugd/internal/kubeclienttest"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		spec, want, err string
	}{
		{"", "<nil>", ""},
		{"daemonset/hotplugd-system/hotplugd", "DaemonSet hotplugd-system/hotplugd", ""},
		{"systemd/hotplugd.service", "systemd unit hotplugd.service", ""},
		{"daemonset/hotplugd", "", "want daemonset/NAMESPACE/NAME"},
		{"daemonset//hotplugd", "", "want daemonset/NAMESPACE/NAME"},
		{"daemonset/a/b/c", "", "want daemonset/NAMESPACE/NAME"},
		{"systemd/", "", "want systemd/UNIT"},
		{"deployment/a/b", "", "want daemonset/NAMESPACE/NAME or systemd/UNIT"},
	} {
		d, err := Parse(tc.spec, nil, nil)
		got := "<nil>"
		if d != nil {
			got = d.String()
		}
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("Parse(%q) = %s, %v; want an error with %q", tc.spec, got, err, tc.err)
			}
			continue
		}
		if err != nil || got != tc.want {
			t.Errorf("Parse(%q) = %s, %v; want %s", tc.spec, got, err, tc.want)
		}
	}
}

func TestUnit(t *testing.T) {
	for _, tc := range []struct {
		state    string
		err      error
		removing bool
	}{
		{"enabled", nil, false},
		{"static", nil, false},
		{"disabled", nil, true},
		{"masked", nil, true},
		{"masked-runtime", nil, true},
		{"", errors.New("no bus"), false},
	} {
		u := Unit{Name: "hotplugd.service", FileState: func(_ context.Context, unit string) (string, error) {
			if unit != "hotplugd.service" {
				t.Errorf("asked about %s", unit)
			}
			return tc.state, tc.err
		}}
		removing, why, err := u.Removing(context.Background())
		if removing != tc.removing || (err != nil) != (tc.err != nil) || (err == nil && !strings.Contains(why, tc.state)) {
			t.Errorf("%q, %v: Removing = %v, %q, %v; want %v", tc.state, tc.err, removing, why, err, tc.removing)
		}
	}
}

// TestDaemonSet covers the answers; the API server's own deletion
// behaviour is test/integration's TestIntegrationPruneAtRemoval.
func TestDaemonSet(t *testing.T) {
	now := metav1.NewTime(time.Now())
	present := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "present"}}
	deleting := &appsv1.DaemonSet{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "deleting", DeletionTimestamp: &now, Finalizers: []string{"foregroundDeletion"}}}
	c := fake.NewClientset(present, deleting)
	for _, tc := range []struct {
		name     string
		removing bool
		why      string
	}{{"present", false, "remains"}, {"deleting", true, "being deleted"}, {"gone", true, "is gone"}} {
		removing, why, err := DaemonSet{Client: kubeclienttest.Clientset(c), Namespace: "ns", Name: tc.name}.Removing(context.Background())
		if err != nil || removing != tc.removing || !strings.Contains(why, tc.why) {
			t.Errorf("%s: %v, %q, %v; want %v and %q", tc.name, removing, why, err, tc.removing, tc.why)
		}
	}
}
