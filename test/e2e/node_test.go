//go:build e2e

package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// pollEvery is how often the scenarios read the Node.
const pollEvery = 50 * time.Millisecond

// getNode reads nodeName; nil when it does not exist.
func getNode(t *testing.T, s *suite) *v1.Node {
	t.Helper()
	n, err := s.api.Client().CoreV1().Nodes().Get(context.Background(), nodeName, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatalf("get node %s: %v", nodeName, err)
	}
	return n
}

// waitNode reads the Node every pollEvery until ok holds, for at most
// timeout, and returns how long after since that was first seen.
func waitNode(t *testing.T, s *suite, since time.Time, timeout time.Duration, ok func(*v1.Node) bool) (time.Duration, *v1.Node, bool) {
	t.Helper()
	deadline := since.Add(timeout)
	for {
		n := getNode(t, s)
		if n != nil && ok(n) {
			return time.Since(since), n, true
		}
		if time.Now().After(deadline) {
			return 0, n, false
		}
		time.Sleep(pollEvery)
	}
}

// holdNode reads the Node every pollEvery for d and returns the first
// reading for which ok does not hold (nil, true: it held throughout).
func holdNode(t *testing.T, s *suite, d time.Duration, ok func(*v1.Node) bool) (*v1.Node, bool) {
	t.Helper()
	for end := time.Now().Add(d); time.Now().Before(end); time.Sleep(pollEvery) {
		if n := getNode(t, s); n == nil || !ok(n) {
			return n, false
		}
	}
	return nil, true
}

// staleCondition is the Node's KubeletCapacityStale condition, nil when
// absent.
func staleCondition(n *v1.Node) *v1.NodeCondition {
	for i := range n.Status.Conditions {
		if n.Status.Conditions[i].Type == nodepatch.ConditionType {
			return &n.Status.Conditions[i]
		}
	}
	return nil
}

// conditionIs matches a Node whose KubeletCapacityStale condition has
// status.
func conditionIs(status v1.ConditionStatus) func(*v1.Node) bool {
	return func(n *v1.Node) bool {
		c := staleCondition(n)
		return c != nil && c.Status == status
	}
}

// quantity is l[name] as the kubelet wrote it ("" when absent).
func quantity(l v1.ResourceList, name v1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return ""
	}
	return q.String()
}

// sameQuantity compares l[name] with want by value.
func sameQuantity(l v1.ResourceList, name v1.ResourceName, want resource.Quantity) bool {
	q, ok := l[name]
	return ok && q.Cmp(want) == 0
}

// eventCount counts the Events on the Node by reason (an Event repeated
// by the recorder counts its count).
type eventCount map[string]int32

// eventCounts reads the Events on the Node.
func eventCounts(t *testing.T, s *suite) eventCount {
	t.Helper()
	list, err := s.api.Client().CoreV1().Events("").List(context.Background(), metav1.ListOptions{
		FieldSelector: "involvedObject.kind=Node,involvedObject.name=" + nodeName,
	})
	if err != nil {
		t.Fatal(err)
	}
	out := eventCount{}
	for _, e := range list.Items {
		out[e.Reason] += max(e.Count, 1)
	}
	return out
}

// since is c less the counts in before.
func (c eventCount) since(before eventCount) eventCount {
	out := eventCount{}
	for r, n := range c {
		if d := n - before[r]; d > 0 {
			out[r] = d
		}
	}
	return out
}

// String reads "CapacityDrift x1, Remediated x1", hotplugd's reasons only.
func (c eventCount) String() string {
	var parts []string
	for _, r := range []string{nodepatch.ReasonCapacityDrift, nodepatch.ReasonRemediated, nodepatch.ReasonRemediationFailed, nodepatch.ReasonNeedsDrain,
		nodepatch.ReasonRestartWithheld, nodepatch.ReasonKubeletWouldRefuse} {
		if c[r] > 0 {
			parts = append(parts, fmt.Sprintf("%s x%d", r, c[r]))
		}
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}
