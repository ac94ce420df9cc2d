package topology

import (
	"fmt"
	"slices"
	"strings"

	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
)

// Change is one difference between two snapshots: a capacity resource, or a
// NUMA node's CPUs, memory or hugepages of one size.
type Change struct {
	// Resource is a capacity resource name ("cpu", "memory",
	// "hugepages-2Mi") or, per node, "cpus" for the node's online CPUs.
	Resource string `json:"resource"`
	// Node is the NUMA node, or -1 for the machine's capacity.
	Node int `json:"node"`
	// Old and New are the values: quantity strings for resources, CPU
	// lists for cpus; "" when absent on that side.
	Old string `json:"old"`
	New string `json:"new"`
}

// String reads "cpu: 2 -> 1" or "node 0 hugepages-2Mi: 0 -> 32Mi".
func (c Change) String() string {
	old, new := c.Old, c.New
	if old == "" {
		old = "none"
	}
	if new == "" {
		new = "none"
	}
	if c.Node < 0 {
		return fmt.Sprintf("%s: %s -> %s", c.Resource, old, new)
	}
	return fmt.Sprintf("node %d %s: %s -> %s", c.Node, c.Resource, old, new)
}

// Diff returns what differs between two snapshots, as a kubelet would see
// it: capacity first (cpu, memory, hugepages by name), then each NUMA node's
// online CPUs, MemTotal and hugepages. Nil when nothing differs; a nil old
// snapshot differs in everything.
func Diff(old, new *Snapshot) []Change {
	var out []Change
	oldCap, newCap := v1.ResourceList{}, new.Capacity()
	if old != nil {
		oldCap = old.Capacity()
	}
	for _, name := range unionNames(oldCap, newCap) {
		o, n := quantityString(oldCap, name), quantityString(newCap, name)
		if o != n {
			out = append(out, Change{Resource: string(name), Node: -1, Old: o, New: n})
		}
	}

	oldNodes, newNodes := nodeValues(old), nodeValues(new)
	ids := make([]int, 0, len(newNodes))
	for id := range oldNodes {
		ids = append(ids, id)
	}
	for id := range newNodes {
		if _, ok := oldNodes[id]; !ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		o, n := oldNodes[id], newNodes[id]
		for _, key := range unionKeys(o, n) {
			if o[key] != n[key] {
				out = append(out, Change{Resource: key, Node: id, Old: o[key], New: n[key]})
			}
		}
	}
	return out
}

// nodeValues renders each node's online CPUs, MemTotal and hugepages as
// comparable strings.
func nodeValues(s *Snapshot) map[int]map[string]string {
	out := map[int]map[string]string{}
	if s == nil {
		return out
	}
	online := s.CPUs.Online.CPUSet
	for _, n := range s.NUMANodes {
		v := map[string]string{
			"cpus":                    n.CPUs.Intersection(online).String(),
			string(v1.ResourceMemory): FormatBytes(n.MemTotalBytes),
		}
		for _, hp := range n.HugePages {
			v[string(HugePageResourceName(hp.PageSizeKiB))] = FormatBytes(hp.Bytes())
		}
		out[n.ID] = v
	}
	return out
}

func quantityString(l v1.ResourceList, name v1.ResourceName) string {
	q, ok := l[name]
	if !ok {
		return ""
	}
	return q.String()
}

func unionNames(a, b v1.ResourceList) []v1.ResourceName {
	var names []v1.ResourceName
	for n := range a {
		names = append(names, n)
	}
	for n := range b {
		if _, ok := a[n]; !ok {
			names = append(names, n)
		}
	}
	slices.SortFunc(names, func(x, y v1.ResourceName) int { return CompareResources(string(x), string(y)) })
	return names
}

func unionKeys(a, b map[string]string) []string {
	var keys []string
	for k := range a {
		keys = append(keys, k)
	}
	for k := range b {
		if _, ok := a[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.SortFunc(keys, CompareResources)
	return keys
}

// CompareResources orders resource names for people: cpu (and a node's
// cpus), memory, then the rest (hugepages) by name.
func CompareResources(a, b string) int {
	rank := func(s string) int {
		switch s {
		case "cpu", "cpus":
			return 0
		case "memory":
			return 1
		}
		return 2
	}
	if ra, rb := rank(a), rank(b); ra != rb {
		return ra - rb
	}
	return strings.Compare(a, b)
}

// FormatBytes formats a byte count as the kubelet formats memory
// ("24682416Ki", "2Gi", "0").
func FormatBytes(b uint64) string {
	return resource.NewQuantity(int64(b), resource.BinarySI).String()
}
