package topology

import (
	"bytes"
	"errors"
	"io/fs"
	"slices"
	"strconv"

	"k8s.io/utils/cpuset"
)

// Snapshot reads the machine's topology, with the state of every memory
// block. Every file is read once; nothing is cached between calls.
func (f FS) Snapshot() (*Snapshot, error) {
	return f.snapshot(true)
}

// CapacitySnapshot reads only what capacity, allocatable and the kubelet's
// resource managers depend on, for the reconcile loop; Snapshot is what an
// operator reads. It leaves out what costs a read per object and never
// changes capacity: the memory blocks (Memory.BlockCount is 0 and
// Memory.Blocks nil; thousands of files on a large machine), and the node of
// an offline CPU (Node is -1: node membership comes from each node's
// cpulist, which holds the online CPUs, instead of a listing of the node
// directory with its hundreds of memory links). For online CPUs, the ones
// capacity counts, both ways give the same node.
func (f FS) CapacitySnapshot() (*Snapshot, error) {
	return f.snapshot(false)
}

func (f FS) snapshot(full bool) (*Snapshot, error) {
	s := &Snapshot{}
	var r reader // buffers shared by every read of this snapshot
	if err := f.readCPUs(&r, &s.CPUs); err != nil {
		return nil, err
	}
	if err := f.readNodes(&r, s, full); err != nil {
		return nil, err
	}
	if err := f.readMemory(&r, &s.Memory, full); err != nil {
		return nil, err
	}
	hp, err := readHugePages(&r, f.SysPath("kernel/mm/hugepages"))
	if err != nil {
		return nil, err
	}
	s.HugePages = hp
	s.DefaultHugePageSizeKiB = s.Memory.defaultHugePageSizeKiB
	return s, nil
}

func (f FS) readCPUs(r *reader, c *CPUs) error {
	d, err := openDir(f.SysPath("devices/system/cpu"))
	if err != nil {
		return err
	}
	defer d.close()
	ids, err := d.indexed(r, "cpu")
	if err != nil {
		return err
	}
	all := cpuset.New(ids...)

	// The lists are optional: without CPU hotplug support the kernel has no
	// online file and every CPU is online (cAdvisor assumes the same).
	lists := []struct {
		name string
		dst  *CPUList
	}{{"possible", &c.Possible}, {"present", &c.Present}, {"online", &c.Online}}
	for _, l := range lists {
		b, err := d.read(r, l.name, "")
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
		var hasPackage, hasCore bool
		for _, a := range []struct {
			file  string
			dst   *int
			found *bool
		}{{"physical_package_id", &cpu.Package, &hasPackage}, {"die_id", &cpu.Die, nil}, {"core_id", &cpu.Core, &hasCore}} {
			b, err := d.read(r, prefix, a.file)
			if errors.Is(err, fs.ErrNotExist) {
				continue // an offline CPU has no topology directory
			}
			if err != nil {
				return err
			}
			if *a.dst, err = parseInt(b); err != nil {
				return parseError(d.path+"/"+prefix+a.file, err)
			}
			if a.found != nil {
				*a.found = true
			}
		}
		// A -1 the kernel wrote is an id like any other for cAdvisor; keep
		// it apart from the -1 of an absent file.
		cpu.UnknownIDs = hasPackage && hasCore && (cpu.Package < 0 || cpu.Core < 0)
		c.List[i] = cpu
	}
	return nil
}

func (f FS) readNodes(r *reader, s *Snapshot, links bool) error {
	d, err := openDir(f.SysPath("devices/system/node"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // a kernel without CONFIG_NUMA
	}
	if err != nil {
		return err
	}
	defer d.close()
	ids, err := d.indexed(r, "node")
	if err != nil {
		return err
	}
	for _, id := range ids {
		node, err := readNode(r, d.path+"/node"+strconv.Itoa(id), id, links)
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

func readNode(r *reader, path string, id int, links bool) (NUMANode, error) {
	node := NUMANode{ID: id}
	d, err := openDir(path)
	if err != nil {
		return node, err
	}
	defer d.close()
	if links {
		// Node membership comes from the cpuN links, as cAdvisor reads
		// it; the links stay while a CPU is offline, cpulist does not.
		cpus, err := d.indexed(r, "cpu")
		if err != nil {
			return node, err
		}
		node.CPUs = CPUList{cpuset.New(cpus...)}
	} else {
		b, err := d.read(r, "cpulist", "")
		if err != nil {
			return node, err
		}
		cpus, err := parseCPUList(b)
		if err != nil {
			return node, parseError(path+"/cpulist", err)
		}
		node.CPUs = CPUList{cpus}
	}

	b, err := d.read(r, "meminfo", "")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// cAdvisor reports 0 for a node without meminfo.
	case err != nil:
		return node, err
	default:
		mi, err := parseMeminfo(b)
		if err != nil {
			return node, parseError(path+"/meminfo", err)
		}
		node.MemTotalBytes = mi.memTotalKiB * 1024
	}

	node.HugePages, err = readHugePages(r, path+"/hugepages")
	return node, err
}

// readHugePages reads every hugepages-<size>kB/nr_hugepages under path, by
// ascending page size. A missing directory means no hugepage support: no
// entries.
func readHugePages(r *reader, path string) ([]HugePages, error) {
	out := []HugePages{}
	d, err := openDir(path)
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, err
	}
	defer d.close()
	var names []string
	err = d.scan(r, func(name []byte) {
		if _, ok := parseHugePageDir(string(name)); ok {
			names = append(names, string(name))
		}
	})
	if err != nil {
		return nil, err
	}
	for _, name := range names {
		size, _ := parseHugePageDir(name)
		b, err := d.read(r, name, "/nr_hugepages")
		if err != nil {
			return nil, err
		}
		n, err := parseUint(b)
		if err != nil {
			return nil, parseError(path+"/"+name+"/nr_hugepages", err)
		}
		out = append(out, HugePages{PageSizeKiB: size, Pages: n})
	}
	slices.SortFunc(out, func(a, b HugePages) int { return cmpUint(a.PageSizeKiB, b.PageSizeKiB) })
	return out, nil
}

func (f FS) readMemory(r *reader, m *Memory, blocks bool) error {
	path := f.ProcPath("meminfo")
	b, err := r.readAt(atFDCWD, "", path, "")
	if err != nil {
		return err
	}
	mi, err := parseMeminfo(b)
	if err != nil {
		return parseError(path, err)
	}
	m.MemTotalBytes = mi.memTotalKiB * 1024
	m.defaultHugePageSizeKiB = mi.hugePageSizeKiB

	d, err := openDir(f.SysPath("devices/system/memory"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no memory hotplug support
	}
	if err != nil {
		return err
	}
	defer d.close()
	b, err = d.read(r, "block_size_bytes", "")
	if err != nil {
		return err
	}
	if m.BlockSizeBytes, err = parseHex(b); err != nil {
		return parseError(d.path+"/block_size_bytes", err)
	}
	if !blocks {
		return nil
	}
	if b, err := d.read(r, "auto_online_blocks", ""); err == nil {
		m.AutoOnlineBlocks = string(bytes.TrimSpace(b))
	}
	ids, err := d.indexed(r, "memory")
	if err != nil {
		return err
	}
	m.BlockCount = len(ids)
	m.Blocks = make(map[string]int, 2)
	for _, block := range ids {
		b, err := d.readIndexed(r, "memory", block, "/state")
		if err != nil {
			return err
		}
		state := internState(bytes.TrimSpace(b))
		if state == "" {
			return parseError(d.path+"/memory"+strconv.Itoa(block)+"/state", errors.New("empty state"))
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
