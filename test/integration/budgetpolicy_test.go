package integration

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	authenticationv1 "k8s.io/api/authentication/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	coordv1client "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/utils/ptr"

	"github.com/hotplugd/hotplugd/internal/kubeclienttest"
	"github.com/hotplugd/hotplugd/pkg/budget"
)

// The restart budget's objects: deploy/kubernetes/budget, which
// components/restart-kubelet and deploy/systemd/cluster include.
var budgetManifests = []string{
	"budget/role-budget.yaml",
	"budget/rolebinding-budget.yaml",
	"budget/admissionpolicy-budget.yaml",
}

// Messages of the restart budget's admission policy.
const (
	denyOtherHolder = "a node may take, renew or give back only its own hold of the restart budget"
	denyNoBudget    = "hotplugd may write only the restart budget's Leases"
)

// TestIntegrationBudgetPolicy applies the base and the restart budget's
// objects to a real API server and shows who may do what with the
// budget's Leases: a DaemonSet pod's token (node-a, node-b) and a systemd
// node's token bound to its Node (node-c) each take, renew and give back
// their own hold through pkg/budget; none can give back or write another
// node's hold, create a Lease that is not the budget's, or delete one; a
// token that names no node takes no hold.
func TestIntegrationBudgetPolicy(t *testing.T) {
	s := startAPIServer(t)
	ctx := context.Background()
	admin := s.Client()
	objs := manifestObjects(t, readKustomization(t))
	var extra kustomization
	for _, f := range budgetManifests {
		if _, err := os.Stat(filepath.Join(deployDir, f)); err != nil {
			t.Fatal(err)
		}
		extra.Resources = append(extra.Resources, f)
	}
	applied := applyManifests(t, s, append(objs, manifestObjects(t, extra)...))
	want := []string{
		"Role " + hotplugdNamespace + "/hotplugd-restart-budget",
		"RoleBinding " + hotplugdNamespace + "/hotplugd-restart-budget",
		"ValidatingAdmissionPolicy hotplugd-restart-budget",
		"ValidatingAdmissionPolicyBinding hotplugd-restart-budget",
	}
	if diff := cmp.Diff(want, applied[len(applied)-len(want):]); diff != "" {
		t.Errorf("the budget's objects (-want +got):\n%s", diff)
	}

	ds, err := admin.AppsV1().DaemonSets(hotplugdNamespace).Get(ctx, "hotplugd", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	rbacNode(t, admin, "node-a")
	rbacNode(t, admin, "node-b")
	a := clientFor(t, s, podToken(t, admin, ds, "node-a"))
	b := clientFor(t, s, podToken(t, admin, ds, "node-b"))
	// node-c runs hotplugd's systemd unit: a token of the service account
	// bound to its Node (docs/install.md: kubectl create token
	// --bound-object-kind Node), which names the node.
	rbacNode(t, admin, "node-c")
	c := clientFor(t, s, nodeToken(t, admin, "node-c"))
	newBudget := func(cl kubernetes.Interface, holder string) *budget.Budget {
		bud, err := budget.New(budget.Options{Client: kubeclienttest.Clientset(cl), Namespace: hotplugdNamespace, Name: "hotplugd-restart", Slots: 1, Holder: holder, Duration: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		return bud
	}
	leases := func(cl kubernetes.Interface) coordv1client.LeaseInterface {
		return cl.CoordinationV1().Leases(hotplugdNamespace)
	}

	// The policy takes effect once the API server's informers have seen
	// it: wait for a dry-run denial of a Lease that is not the budget's.
	stray := &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "stray"}, Spec: coordinationv1.LeaseSpec{HolderIdentity: ptr.To("node-a")}}
	deadline := time.Now().Add(30 * time.Second)
	for {
		_, err := leases(a).Create(ctx, stray, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if apierrors.IsForbidden(err) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the budget's admission policy is not in effect after 30 s: %v", err)
		}
		time.Sleep(100 * time.Millisecond)
	}
	_, err = leases(a).Create(ctx, stray, metav1.CreateOptions{})
	checkForbidden(t, err, denyNoBudget)

	// node-a takes the one slot; node-b and node-c find it taken.
	ha, err := newBudget(a, "node-a").Acquire(ctx)
	if err != nil {
		t.Fatalf("node-a's pod cannot take the budget: %v", err)
	}
	for holder, cl := range map[string]kubernetes.Interface{"node-b": b, "node-c": c} {
		var ex *budget.Exhausted
		if _, err := newBudget(cl, holder).Acquire(ctx); !errors.As(err, &ex) {
			t.Errorf("%s: %v, want the budget taken by node-a", holder, err)
		}
	}
	if err := ha.Renew(ctx); err != nil {
		t.Errorf("node-a cannot renew its hold: %v", err)
	}

	// Nobody else gives node-a's hold back, or names another holder.
	slot := ha.Slot()
	for name, tc := range map[string]struct {
		cl     kubernetes.Interface
		holder string
	}{
		"node-b gives node-a's hold back":    {b, ""},
		"node-c gives node-a's hold back":    {c, ""},
		"node-b makes node-c the holder":     {b, "node-c"},
		"node-a makes node-b the holder":     {a, "node-b"},
		"node-c makes node-a the holder":     {c, "node-a"},
		"node-a's token makes nobody holder": {a, "nobody"},
	} {
		l, err := leases(tc.cl).Get(ctx, slot, metav1.GetOptions{})
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		l.Spec.HolderIdentity = ptr.To(tc.holder)
		_, err = leases(tc.cl).Update(ctx, l, metav1.UpdateOptions{})
		t.Run(name, func(t *testing.T) { checkForbidden(t, err, denyOtherHolder) })
	}
	// Its label stays.
	l, err := leases(a).Get(ctx, slot, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	delete(l.Labels, budget.LabelBudget)
	_, err = leases(a).Update(ctx, l, metav1.UpdateOptions{})
	checkForbidden(t, err, denyNoBudget)
	// No delete, for either kind of credentials.
	checkForbidden(t, leases(a).Delete(ctx, slot, metav1.DeleteOptions{}), `cannot delete resource "leases"`)
	checkForbidden(t, leases(c).Delete(ctx, slot, metav1.DeleteOptions{}), `cannot delete resource "leases"`)

	// node-a gives it back; node-c's kubelet credentials take it, renew
	// it and give it back.
	if err := ha.Release(ctx); err != nil {
		t.Fatalf("node-a cannot give its hold back: %v", err)
	}
	hc, err := newBudget(c, "node-c").Acquire(ctx)
	if err != nil {
		t.Fatalf("node-c's kubelet credentials cannot take the budget: %v", err)
	}
	if err := hc.Renew(ctx); err != nil {
		t.Errorf("node-c cannot renew its hold: %v", err)
	}
	if err := hc.Release(ctx); err != nil {
		t.Errorf("node-c cannot give its hold back: %v", err)
	}
	// The service account reaches no Lease outside the budget's namespace.
	if _, err := c.CoordinationV1().Leases("default").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("node-c lists Leases in default: %v, want 403", err)
	}
	// A token of the service account that names no node takes no hold.
	tr, err := admin.CoreV1().ServiceAccounts(hotplugdNamespace).CreateToken(ctx, hotplugdAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(600))},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	_, err = newBudget(clientFor(t, s, tr.Status.Token), "node-a").Acquire(ctx)
	checkForbidden(t, err, "this token names no node")
}

// nodeToken is a token of the hotplugd service account bound to the Node
// name, as docs/install.md has an admin make for a systemd node.
func nodeToken(t testing.TB, c kubernetes.Interface, name string) string {
	t.Helper()
	ctx := context.Background()
	n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	tr, err := c.CoreV1().ServiceAccounts(hotplugdNamespace).CreateToken(ctx, hotplugdAccount, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{
			ExpirationSeconds: ptr.To(int64(3600)),
			BoundObjectRef:    &authenticationv1.BoundObjectReference{Kind: "Node", APIVersion: "v1", Name: n.Name, UID: n.UID},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("a token bound to Node %s: %v", name, err)
	}
	return tr.Status.Token
}
