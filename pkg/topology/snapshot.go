package topology

import (
	"bytes"
	"encoding/json"
	"errors"
	"io/fs"
	"slices"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// CPUList is a set of CPU ids that marshals to JSON in the kernel's list
// format ("0-3,8-11").
type CPUList struct {
	cpuset.CPUSet
}

// MarshalJSON writes the set as a kernel CPU list string.
func (l CPUList) MarshalJSON() ([]byte, error) { return json.Marshal(l.String()) }

// UnmarshalJSON reads a kernel CPU list string.
func (l *CPUList) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return err
	}
	set, err := cpuset.Parse(s)
	if err != nil {
		return err
	}
	l.CPUSet = set
	return nil
}

// Snapshot is the machine's CPUs, memory and hugepages at one moment.
type Snapshot struct {
	CPUs      CPUs       `json:"cpus"`
	NUMANodes []NUMANode `json:"numaNodes"`
	Memory    Memory     `json:"memory"`
	// HugePages are the global persistent hugepages per size, ascending.
	HugePages []HugePages `json:"hugepages"`
	// DefaultHugePageSizeKiB is Hugepagesize of /proc/meminfo, the size
	// /proc/sys/vm/nr_hugepages counts; 0 without hugepage support.
	DefaultHugePageSizeKiB uint64 `json:"defaultHugePageSizeKiB"`
}

// CPUs describes the logical CPUs the kernel knows.
type CPUs struct {
	// Possible, Present and Online are the kernel's cpu/{possible,present,online} lists.
	Possible CPUList `json:"possible"`
	Present  CPUList `json:"present"`
	Online   CPUList `json:"online"`
	// List has one entry per cpuN directory, ordered by id.
	List []CPU `json:"list"`
}

// CPU is one logical CPU. Package, Die and Core are -1 when the kernel does
// not expose them (an offline CPU has no topology directory); Node is -1 when
// the CPU is linked under no NUMA node.
type CPU struct {
	ID      int  `json:"id"`
	Online  bool `json:"online"`
	Package int  `json:"package"`
	Die     int  `json:"die"`
	Core    int  `json:"core"`
	Node    int  `json:"node"`
}

// NUMANode is one /sys/devices/system/node/nodeN.
type NUMANode struct {
	ID int `json:"id"`
	// CPUs are the CPUs linked under the node (cpuN entries), online or not.
	CPUs CPUList `json:"cpus"`
	// MemTotalBytes is the node's MemTotal; 0 when the node has no meminfo.
	MemTotalBytes uint64      `json:"memTotalBytes"`
	HugePages     []HugePages `json:"hugepages"`
}

// Memory describes the machine's memory.
type Memory struct {
	// MemTotalBytes is MemTotal of /proc/meminfo, what the kubelet reports.
	MemTotalBytes uint64 `json:"memTotalBytes"`
	// BlockSizeBytes is the memory hotplug block size; 0 without memory hotplug support.
	BlockSizeBytes uint64 `json:"blockSizeBytes"`
	// Blocks counts memory blocks by state (online, offline, going-offline).
	Blocks map[string]int `json:"blocks"`
	// AutoOnlineBlocks is the policy for hot-added blocks (offline, online, online_movable ...).
	AutoOnlineBlocks string `json:"autoOnlineBlocks,omitempty"`

	defaultHugePageSizeKiB uint64
}

// HugePages is the number of persistent hugepages of one size.
type HugePages struct {
	PageSizeKiB uint64 `json:"pageSizeKiB"`
	Pages       uint64 `json:"pages"`
}

// Bytes returns the memory the pages take.
func (h HugePages) Bytes() uint64 { return h.PageSizeKiB * 1024 * h.Pages }

// Snapshot reads the machine's topology. Every file is read once; nothing is
// cached between calls.
func (f FS) Snapshot() (*Snapshot, error) {
	s := &Snapshot{}
	if err := f.readCPUs(&s.CPUs); err != nil {
		return nil, err
	}
	if err := f.readNodes(s); err != nil {
		return nil, err
	}
	if err := f.readMemory(&s.Memory); err != nil {
		return nil, err
	}
	hp, err := f.readHugePages(f.SysPath("kernel/mm/hugepages"))
	if err != nil {
		return nil, err
	}
	s.HugePages = hp
	s.DefaultHugePageSizeKiB = s.Memory.defaultHugePageSizeKiB
	return s, nil
}

func (f FS) readCPUs(c *CPUs) error {
	d, err := openDir(f.SysPath("devices/system/cpu"))
	if err != nil {
		return err
	}
	defer d.close()
	names, err := d.names()
	if err != nil {
		return err
	}
	ids := make([]int, 0, len(names))
	for _, name := range names {
		if id, ok := parseIndexedName(name, "cpu"); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	all := cpuset.New(ids...)

	// The lists are optional: without CPU hotplug support the kernel has no
	// online file and every CPU is online (cAdvisor assumes the same).
	lists := []struct {
		name string
		dst  *CPUList
	}{{"possible", &c.Possible}, {"present", &c.Present}, {"online", &c.Online}}
	var r reader
	for _, l := range lists {
		b, err := d.read(&r, l.name, "")
		switch {
		case errors.Is(err, fs.ErrNotExist):
			l.dst.CPUSet = all
			continue
		case err != nil:
			return err
		}
		set, err := parseCPUList(b)
		if err != nil {
			return parseError(d.path+"/"+l.name, err)
		}
		l.dst.CPUSet = set
	}

	c.List = make([]CPU, len(ids))
	for i, id := range ids {
		cpu := CPU{ID: id, Online: c.Online.Contains(id), Package: -1, Die: -1, Core: -1, Node: -1}
		prefix := "cpu" + strconv.Itoa(id) + "/topology/"
		for _, a := range []struct {
			file string
			dst  *int
		}{{"physical_package_id", &cpu.Package}, {"die_id", &cpu.Die}, {"core_id", &cpu.Core}} {
			v, err := readIntOptional(d, &r, prefix, a.file)
			if err != nil {
				return err
			}
			if v != nil {
				*a.dst = *v
			}
		}
		c.List[i] = cpu
	}
	return nil
}

// readIntOptional reads an integer attribute; nil when the file is absent.
func readIntOptional(d *dir, r *reader, name, suffix string) (*int, error) {
	b, err := d.read(r, name, suffix)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	v, err := parseInt(b)
	if err != nil {
		return nil, parseError(d.path+"/"+name+suffix, err)
	}
	return &v, nil
}

func (f FS) readNodes(s *Snapshot) error {
	dir := f.SysPath("devices/system/node")
	names, err := readDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a kernel without CONFIG_NUMA
	}
	if err != nil {
		return err
	}
	var ids []int
	for _, name := range names {
		if id, ok := parseIndexedName(name, "node"); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	for _, id := range ids {
		node, err := f.readNode(id)
		if err != nil {
			return err
		}
		for _, cpu := range node.CPUs.List() {
			if i, ok := slices.BinarySearchFunc(s.CPUs.List, cpu, func(c CPU, id int) int { return c.ID - id }); ok {
				s.CPUs.List[i].Node = id
			}
		}
		s.NUMANodes = append(s.NUMANodes, node)
	}
	return nil
}

func (f FS) readNode(id int) (NUMANode, error) {
	dir := f.SysPath("devices/system/node", "node"+strconv.Itoa(id))
	node := NUMANode{ID: id}
	names, err := readDirNames(dir)
	if err != nil {
		return node, err
	}
	// Node membership comes from the cpuN links, as cAdvisor reads it; the
	// links stay while a CPU is offline, cpulist does not.
	var cpus []int
	for _, name := range names {
		if c, ok := parseIndexedName(name, "cpu"); ok {
			cpus = append(cpus, c)
		}
	}
	node.CPUs = CPUList{cpuset.New(cpus...)}

	path := dir + "/meminfo"
	b, err := readFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// cAdvisor reports 0 for a node without meminfo.
	case err != nil:
		return node, err
	default:
		mi, err := parseMeminfo(b)
		if err != nil {
			return node, parseError(path, err)
		}
		node.MemTotalBytes = mi.memTotalKiB * 1024
	}

	node.HugePages, err = f.readHugePages(dir + "/hugepages")
	return node, err
}

// readHugePages reads every hugepages-<size>kB/nr_hugepages under dir, by
// ascending page size. A missing dir means no hugepage support: no entries.
func (f FS) readHugePages(dir string) ([]HugePages, error) {
	names, err := readDirNames(dir)
	if errors.Is(err, fs.ErrNotExist) {
		return []HugePages{}, nil
	}
	if err != nil {
		return nil, err
	}
	out := []HugePages{}
	for _, name := range names {
		size, ok := parseHugePageDir(name)
		if !ok {
			continue
		}
		path := dir + "/" + name + "/nr_hugepages"
		b, err := readFile(path)
		if err != nil {
			return nil, err
		}
		n, err := parseUint(b)
		if err != nil {
			return nil, parseError(path, err)
		}
		out = append(out, HugePages{PageSizeKiB: size, Pages: n})
	}
	slices.SortFunc(out, func(a, b HugePages) int { return cmpUint(a.PageSizeKiB, b.PageSizeKiB) })
	return out, nil
}

func (f FS) readMemory(m *Memory) error {
	path := f.ProcPath("meminfo")
	b, err := readFile(path)
	if err != nil {
		return err
	}
	mi, err := parseMeminfo(b)
	if err != nil {
		return parseError(path, err)
	}
	m.MemTotalBytes = mi.memTotalKiB * 1024
	m.defaultHugePageSizeKiB = mi.hugePageSizeKiB
	m.Blocks = map[string]int{}

	d, err := openDir(f.SysPath("devices/system/memory"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no memory hotplug support
	}
	if err != nil {
		return err
	}
	defer d.close()
	var r reader
	b, err = d.read(&r, "block_size_bytes", "")
	if err != nil {
		return err
	}
	if m.BlockSizeBytes, err = parseHex(b); err != nil {
		return parseError(d.path+"/block_size_bytes", err)
	}
	if b, err := d.read(&r, "auto_online_blocks", ""); err == nil {
		m.AutoOnlineBlocks = strings.TrimSpace(string(b))
	}
	names, err := d.names()
	if err != nil {
		return err
	}
	blocks := names[:0]
	for _, name := range names {
		if _, ok := parseIndexedName(name, "memory"); ok {
			blocks = append(blocks, name)
		}
	}
	for _, block := range blocks {
		b, err := d.read(&r, block, "/state")
		if err != nil {
			return err
		}
		state := internState(bytes.TrimSpace(b))
		if state == "" {
			return parseError(d.path+"/"+block+"/state", errors.New("empty state"))
		}
		m.Blocks[state]++
	}
	return nil
}

// internState returns a memory block state without allocating for the
// states the kernel writes.
func internState(b []byte) string {
	for _, s := range []string{"online", "offline", "going-offline"} {
		if string(b) == s {
			return s
		}
	}
	return string(b)
}

func cmpUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
