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
// block. Every file is opened and read once; nothing is kept between calls.
func (f FS) Snapshot() (*Snapshot, error) {
	var r reader // buffers shared by every read of this snapshot
	return f.snapshot(&r, true)
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
//
// It keeps the sysfs and procfs files it read open for the next call, which
// reads each again from its start (see openFiles): every value still comes
// from the kernel at the time of the call, but for the few the kernel fixes
// at boot, read once.
func (f FS) CapacitySnapshot() (*Snapshot, error) {
	if f.open == nil {
		var r reader
		return f.snapshot(&r, false)
	}
	f.open.mu.Lock()
	defer f.open.mu.Unlock()
	defer f.open.set.end()
	return f.snapshot(f.open.set.begin(), false)
}

func (f FS) snapshot(r *reader, full bool) (*Snapshot, error) {
	s := &Snapshot{}
	if err := f.readCPUs(r, &s.CPUs); err != nil {
		return nil, err
	}
	if err := f.readNodes(r, s, full); err != nil {
		return nil, err
	}
	if err := f.readMemory(r, &s.Memory, full); err != nil {
		return nil, err
	}
	d, err := r.openStableDir(f.SysPath("kernel/mm/hugepages"))
	switch {
	case errors.Is(err, fs.ErrNotExist):
		s.HugePages = []HugePages{} // no hugepage support
	case err != nil:
		return nil, err
	default:
		s.HugePages, err = readHugePages(r, &d, true)
		d.close()
		if err != nil {
			return nil, err
		}
	}
	s.DefaultHugePageSizeKiB = s.Memory.defaultHugePageSizeKiB
	return s, nil
}

// topologyFiles are the files of cpuN/topology a CPU's ids come from, in the
// order of CPU's Package, Die and Core.
var topologyFiles = [...]string{"/topology/physical_package_id", "/topology/die_id", "/topology/core_id"}

func (f FS) readCPUs(r *reader, c *CPUs) error {
	d, err := r.openStableDir(f.SysPath("devices/system/cpu"))
	if err != nil {
		return err
	}
	defer d.close()
	ids, err := d.indexed(r, "cpu")
	if err != nil {
		return err
	}

	// The lists are optional: without CPU hotplug support the kernel has no
	// online file and every CPU is online (cAdvisor assumes the same).
	lists := [...]struct {
		name  string
		dst   *CPUList
		fixed bool // by the kernel at boot
	}{{"possible", &c.Possible, true}, {"present", &c.Present, false}, {"online", &c.Online, false}}
	for _, l := range lists {
		var b []byte
		if l.fixed {
			b, err = d.readFixed(r, l.name)
		} else {
			b, err = d.read(r, l.name, "")
		}
		switch {
		case errors.Is(err, fs.ErrNotExist):
			l.dst.CPUSet = cpuset.New(ids...)
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
		dst := [len(topologyFiles)]*int{&cpu.Package, &cpu.Die, &cpu.Core}
		var found [len(topologyFiles)]bool
		for j, file := range topologyFiles {
			b, err := d.readIndexed(r, "cpu", id, file)
			if errors.Is(err, fs.ErrNotExist) {
				continue // an offline CPU has no topology directory
			}
			if err != nil {
				return err
			}
			if *dst[j], err = parseInt(b); err != nil {
				return parseError(d.path+"/cpu"+strconv.Itoa(id)+file, err)
			}
			found[j] = true
		}
		// A -1 the kernel wrote is an id like any other for cAdvisor; keep
		// it apart from the -1 of an absent file.
		hasPackage, hasCore := found[0], found[2]
		cpu.UnknownIDs = hasPackage && hasCore && (cpu.Package < 0 || cpu.Core < 0)
		c.List[i] = cpu
	}
	return nil
}

func (f FS) readNodes(r *reader, s *Snapshot, links bool) error {
	d, err := r.openStableDir(f.SysPath("devices/system/node"))
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
		node, err := readNode(r, &d, id, links)
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

// readNode reads nodeN of the node directory nodes. Its files are read
// relative to nodes: a node's own directory is opened only to list it.
func readNode(r *reader, nodes *dir, id int, links bool) (NUMANode, error) {
	node := NUMANode{ID: id}
	name := "node" + strconv.Itoa(id)
	if links {
		// Node membership comes from the cpuN links, as cAdvisor reads
		// it; the links stay while a CPU is offline, cpulist does not.
		d, err := openDirAt(nodes.fd, nodes.path, name)
		if err != nil {
			return node, err
		}
		cpus, err := d.indexed(r, "cpu")
		d.close()
		if err != nil {
			return node, err
		}
		node.CPUs = CPUList{cpuset.New(cpus...)}
	} else {
		b, err := nodes.read(r, name, "/cpulist")
		if err != nil {
			return node, err
		}
		cpus, err := parseCPUList(b)
		if err != nil {
			return node, parseError(nodes.path+"/"+name+"/cpulist", err)
		}
		node.CPUs = CPUList{cpus}
	}

	b, err := nodes.read(r, name, "/meminfo")
	switch {
	case errors.Is(err, fs.ErrNotExist):
		// cAdvisor reports 0 for a node without meminfo.
	case err != nil:
		return node, err
	default:
		mi, err := parseMeminfo(b)
		if err != nil {
			return node, parseError(nodes.path+"/"+name+"/meminfo", err)
		}
		node.MemTotalBytes = mi.memTotalKiB * 1024
	}

	node.HugePages, err = readNodeHugePages(r, nodes, name)
	return node, err
}

// readNodeHugePages reads the hugepages of nodeN (name) of the node
// directory nodes. Its hugepages directory is kept open between capacity
// snapshots, although it goes with its node: the kernel gives it a
// directory per hugepage size, so a kept one that lists none is one the
// kernel removed since (see openKeptDir), and it is opened again by its
// name; so is one whose read fails.
func readNodeHugePages(r *reader, nodes *dir, name string) ([]HugePages, error) {
	for again := false; ; again = true {
		d, err := r.openKeptDir(nodes.fd, nodes.path, name+"/hugepages")
		if errors.Is(err, fs.ErrNotExist) {
			return []HugePages{}, nil // no hugepage support
		}
		if err != nil {
			return nil, err
		}
		kept := d.kept
		hp, err := readHugePages(r, &d, false)
		if kept && !again && (err != nil || len(hp) == 0) {
			d.forgetKept(r)
			continue
		}
		d.close()
		return hp, err
	}
}

// readHugePages reads every hugepages-<size>kB/nr_hugepages of the hugepages
// directory d, by ascending page size. fixed is set for kernel/mm/hugepages,
// whose sizes the kernel fixes at boot: it is listed once (fixedNames).
func readHugePages(r *reader, d *dir, fixed bool) ([]HugePages, error) {
	out := []HugePages{}
	isSize := func(name []byte) bool {
		_, ok := parseHugePageDir(bytesToString(name))
		return ok
	}
	var names []string
	var err error
	if fixed {
		names, err = d.fixedNames(r, isSize)
	} else {
		err = d.scan(r, func(name []byte) {
			if isSize(name) {
				names = append(names, string(name))
			}
		})
	}
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
			return nil, parseError(d.path+"/"+name+"/nr_hugepages", err)
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

	d, err := r.openStableDir(f.SysPath("devices/system/memory"))
	if errors.Is(err, fs.ErrNotExist) {
		return nil // no memory hotplug support
	}
	if err != nil {
		return err
	}
	defer d.close()
	b, err = d.readFixed(r, "block_size_bytes")
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
