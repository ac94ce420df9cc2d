package main

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"

	"github.com/spf13/pflag"
	v1 "k8s.io/api/core/v1"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"

	"github.com/hotplugd/hotplugd/pkg/kubeletconfig"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

// snapshotOptions are the flags of `hotplugd snapshot`.
type snapshotOptions struct {
	SysfsRoot     string
	ProcfsRoot    string
	KubeletConfig string
	Output        string
}

// AddFlags registers the options on fs.
func (o *snapshotOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.SysfsRoot, "sysfs-root", "/sys", "sysfs mount to read the topology from (e.g. /host/sys in a container, or a fixture tree)")
	fs.StringVar(&o.ProcfsRoot, "procfs-root", "/proc", "procfs mount to read meminfo from (e.g. /host/proc)")
	fs.StringVar(&o.KubeletConfig, "kubelet-config", "", "KubeletConfiguration file used to predict allocatable (default: a kubelet with no config file, which reserves nothing: the kubelet applies its default evictionHard, memory.available=100Mi and others, only to a loaded config file, so allocatable equals capacity)")
	fs.StringVarP(&o.Output, "output", "o", "table", "output format: table (a summary), wide (table plus one line per CPU) or json (everything)")
}

// Validate checks the option values.
func (o *snapshotOptions) Validate() error {
	if !slices.Contains([]string{"table", "wide", "json"}, o.Output) {
		return fmt.Errorf("--output must be table, wide or json, not %q", o.Output)
	}
	if o.SysfsRoot == "" || o.ProcfsRoot == "" {
		return errors.New("--sysfs-root and --procfs-root must not be empty")
	}
	return nil
}

// snapshotReport is the JSON document `hotplugd snapshot -o json` prints.
type snapshotReport struct {
	*topology.Snapshot
	Capacity    v1.ResourceList `json:"capacity"`
	Allocatable v1.ResourceList `json:"allocatable"`
}

func runSnapshot(args []string, stdout, stderr io.Writer) int {
	var o snapshotOptions
	if code, done := parseFlags("snapshot", "Usage: hotplugd snapshot [flags]\n\nPrints this machine's CPUs, NUMA nodes, memory and hugepages, and the\ncapacity and allocatable a freshly started kubelet would report.\n\nFlags:\n%s", &o, args, stderr); done {
		return code
	}
	rep, err := takeSnapshot(o)
	if err != nil {
		fmt.Fprintf(stderr, "hotplugd snapshot: %v\n", err)
		return 1
	}
	switch o.Output {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		err = enc.Encode(rep)
	default:
		err = writeTable(stdout, rep, o.Output == "wide")
	}
	if err != nil {
		fmt.Fprintf(stderr, "hotplugd snapshot: %v\n", err)
		return 1
	}
	return 0
}

func takeSnapshot(o snapshotOptions) (*snapshotReport, error) {
	cfg := kubeletconfig.Default()
	if o.KubeletConfig != "" {
		var err error
		if cfg, err = kubeletconfig.Load(o.KubeletConfig); err != nil {
			return nil, err
		}
	}
	snap, err := topology.NewFS(o.SysfsRoot, o.ProcfsRoot).Snapshot()
	if err != nil {
		return nil, err
	}
	return report(snap, cfg)
}

func report(snap *topology.Snapshot, cfg *kubeletv1beta1.KubeletConfiguration) (*snapshotReport, error) {
	alloc, err := snap.Allocatable(cfg)
	if err != nil {
		return nil, err
	}
	return &snapshotReport{Snapshot: snap, Capacity: snap.Capacity(), Allocatable: alloc}, nil
}

// writeTable prints what an operator reads at a glance.
func writeTable(w io.Writer, r *snapshotReport, wide bool) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	s := r.Snapshot
	offline := s.CPUs.Present.Difference(s.CPUs.Online.CPUSet)
	fmt.Fprintf(tw, "CPUs\t%d online (%s)", s.CPUs.Online.Size(), listOrNone(s.CPUs.Online.String()))
	if offline.Size() > 0 {
		fmt.Fprintf(tw, ", %d offline (%s)", offline.Size(), offline)
	}
	fmt.Fprintf(tw, ", %d possible\n", s.CPUs.Possible.Size())
	if len(s.NUMANodes) == 0 && offline.Size() > 0 {
		fmt.Fprintf(tw, "\tno NUMA nodes: the kubelet (cAdvisor) counts offline CPUs in its cpu capacity\n")
	}
	fmt.Fprintf(tw, "Memory\t%s MemTotal", topology.FormatBytes(s.Memory.MemTotalBytes))
	if s.Memory.BlockSizeBytes > 0 {
		fmt.Fprintf(tw, ", blocks of %s: %s", topology.FormatBytes(s.Memory.BlockSizeBytes), blockStates(s.Memory.Blocks))
		if s.Memory.AutoOnlineBlocks != "" {
			fmt.Fprintf(tw, ", hot-added blocks: %s", s.Memory.AutoOnlineBlocks)
		}
	}
	fmt.Fprintln(tw)
	fmt.Fprintf(tw, "Hugepages\t%s\n", hugePages(s.HugePages))
	fmt.Fprintln(tw)

	fmt.Fprintln(tw, "RESOURCE\tCAPACITY\tALLOCATABLE")
	names := make([]string, 0, len(r.Capacity))
	for n := range r.Capacity {
		names = append(names, string(n))
	}
	slices.SortFunc(names, topology.CompareResources)
	for _, n := range names {
		c, a := r.Capacity[v1.ResourceName(n)], r.Allocatable[v1.ResourceName(n)]
		fmt.Fprintf(tw, "%s\t%s\t%s\n", n, c.String(), a.String())
	}

	if len(s.NUMANodes) > 0 {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "NUMA NODE\tCPUS\tMEMTOTAL\tHUGEPAGES")
		for _, n := range s.NUMANodes {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", n.ID, listOrNone(n.CPUs.String()), topology.FormatBytes(n.MemTotalBytes), hugePages(n.HugePages))
		}
	}
	if wide {
		fmt.Fprintln(tw)
		fmt.Fprintln(tw, "CPU\tONLINE\tSOCKET\tDIE\tCORE\tNODE")
		for _, c := range s.CPUs.List {
			fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\n", c.ID, yesNo(c.Online), id(c.Package), id(c.Die), id(c.Core), id(c.Node))
		}
	}
	return tw.Flush()
}

func hugePages(hp []topology.HugePages) string {
	if len(hp) == 0 {
		return "not supported"
	}
	parts := make([]string, 0, len(hp))
	for _, h := range hp {
		parts = append(parts, fmt.Sprintf("%s x %d", topology.FormatBytes(h.PageSizeKiB*1024), h.Pages))
	}
	return strings.Join(parts, ", ")
}

func blockStates(m map[string]int) string {
	states := make([]string, 0, len(m))
	for s := range m {
		states = append(states, s)
	}
	slices.Sort(states)
	parts := make([]string, 0, len(states))
	for _, s := range states {
		parts = append(parts, fmt.Sprintf("%d %s", m[s], s))
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, ", ")
}

func listOrNone(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func id(i int) string {
	if i < 0 {
		return "-"
	}
	return fmt.Sprint(i)
}
