package nodepatch

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/hotplugd/hotplugd/pkg/kubeclient"
)

// Owned is what hotplugd has left on a Node: its condition (nil: none)
// and the annotations under AnnotationPrefix, sorted.
type Owned struct {
	Condition   *v1.NodeCondition
	Annotations []string
}

// Empty says whether the Node carries nothing of hotplugd's.
func (o Owned) Empty() bool { return o.Condition == nil && len(o.Annotations) == 0 }

// OwnedBy lists what node carries of hotplugd's.
func OwnedBy(node *v1.Node) Owned {
	var o Owned
	if c := FindCondition(node); c != nil {
		cc := *c
		o.Condition = &cc
	}
	for _, k := range slices.Sorted(maps.Keys(node.Annotations)) {
		if strings.HasPrefix(k, AnnotationPrefix) {
			o.Annotations = append(o.Annotations, k)
		}
	}
	return o
}

// PrunePatch is the nodes/status strategic-merge patch that removes what
// node carries of hotplugd's, every annotation under the prefix included
// (those of other hotplugd versions too); nil when there is nothing. The
// admission policy hotplugd-own-node lets hotplugd's own token send it.
func PrunePatch(node *v1.Node) []byte {
	o := OwnedBy(node)
	if o.Empty() {
		return nil
	}
	body := map[string]any{}
	if len(o.Annotations) > 0 {
		ann := map[string]any{}
		for _, k := range o.Annotations {
			ann[k] = nil
		}
		body["metadata"] = map[string]any{"annotations": ann}
	}
	if o.Condition != nil {
		body["status"] = map[string]any{"conditions": []map[string]any{{"type": string(ConditionType), "$patch": "delete"}}}
	}
	b, _ := json.Marshal(body)
	return b
}

// Prune removes what hotplugd has left on its Node and returns what it
// found (and, unless dryRun, removed). A Node that carries nothing of
// hotplugd's is not written.
func Prune(ctx context.Context, c kubeclient.Interface, name string, dryRun bool) (Owned, error) {
	n, err := c.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return Owned{}, fmt.Errorf("reading Node %s: %w", name, err)
	}
	o := OwnedBy(n)
	p := PrunePatch(n)
	if p == nil {
		return o, nil
	}
	opts := metav1.PatchOptions{FieldManager: "hotplugd"}
	if dryRun {
		opts.DryRun = []string{metav1.DryRunAll}
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, p, opts, "status"); err != nil {
		return o, fmt.Errorf("removing hotplugd's condition and annotations from Node %s: %w", name, err)
	}
	return o, nil
}
