package fixturegen

// Fixture is a named machine whose archive is checked in as
// pkg/topology/testdata/fixtures/<Name>.tar.gz.
type Fixture struct {
	Name    string
	Machine Machine
}

const (
	kb2M = 2048
	kb1G = 1048576
	mib  = 1 << 20
	gib  = 1 << 30
)

// Fixtures returns the synthetic machines checked in as test fixtures.
func Fixtures() []Fixture {
	both := []int{kb2M, kb1G}
	return []Fixture{
		{"dual-socket-smt2", Machine{
			// cpu0-3 socket0, cpu4-7 socket1, then their SMT siblings.
			Sockets: 2, CoresPerSocket: 4, ThreadsPerCore: 2,
			Nodes: []Node{
				{CPUs: append(CPUs(0, 3), CPUs(8, 11)...), MemTotalKB: 65536000, HugePages: map[int]int{kb2M: 512, kb1G: 4}},
				{CPUs: append(CPUs(4, 7), CPUs(12, 15)...), MemTotalKB: 65536000, HugePages: map[int]int{kb2M: 256, kb1G: 2}},
			},
			MemTotalKB:      131006464,
			MemoryBlockSize: 128 * mib, MemoryBlocks: Blocks(1000), // 2 x 65536000 kB
			HugePageSizesKB: both,
		}},
		{"offline-cpus", Machine{
			Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 2,
			OfflineCPUs:     CPUs(4, 7), // every SMT sibling offline
			Nodes:           []Node{{CPUs: CPUs(0, 7), MemTotalKB: 16384000}},
			MemoryBlockSize: 128 * mib, MemoryBlocks: Blocks(125),
			HugePageSizesKB: both,
		}},
		{"large-448", large448()},
		{"no-numa", Machine{
			Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 1,
			OfflineCPUs:     []int{3},
			NoNUMA:          true,
			Nodes:           []Node{{CPUs: CPUs(0, 3), MemTotalKB: 8126464, HugePages: map[int]int{kb2M: 128}}},
			MemoryBlockSize: 128 * mib, MemoryBlocks: Blocks(64),
			HugePageSizesKB: []int{kb2M},
		}},
		{"no-hugepages", Machine{
			Sockets: 1, CoresPerSocket: 2, ThreadsPerCore: 1,
			Nodes:           []Node{{CPUs: CPUs(0, 1), MemTotalKB: 4194304}},
			MemoryBlockSize: 128 * mib, MemoryBlocks: Blocks(32),
		}},
	}
}

// large448 is 8 sockets x 28 cores x 2 threads, one node per socket with
// 768 GiB installed (384 blocks of 2 GiB). The last 2 blocks of each node are
// offline, so each node's MemTotal is the 764 GiB of its 382 online blocks.
func large448() Machine {
	const sockets, cores, blocksPerNode = 8, 28, 384
	m := Machine{
		Sockets: sockets, CoresPerSocket: cores, ThreadsPerCore: 2,
		MemoryBlockSize: 2 * gib, HugePageSizesKB: []int{kb2M, kb1G},
	}
	var offline []int
	for s := range sockets {
		first := s * cores
		m.Nodes = append(m.Nodes, Node{
			CPUs:       append(CPUs(first, first+cores-1), CPUs(sockets*cores+first, sockets*cores+first+cores-1)...),
			MemTotalKB: (blocksPerNode - 2) * 2 * gib / 1024,
			HugePages:  map[int]int{kb2M: 1024, kb1G: 16},
		})
		offline = append(offline, (s+1)*blocksPerNode-2, (s+1)*blocksPerNode-1)
	}
	m.MemoryBlocks = Blocks(sockets*blocksPerNode, offline...)
	m.MemTotalKB = sockets*m.Nodes[0].MemTotalKB - 8*65536 // kernel reservations
	return m
}

// PowerVMLPAR is a logical partition as PowerVM shows it to Linux: one
// chip's 4 cores x 4 threads (SMT4) split over 2 NUMA nodes, every
// physical_package_id -1 (the firmware gives no chip id), cpu13 offline. It
// is not one of the checked-in Fixtures (each of those has golden output in
// several packages); tests write it with WriteDir.
func PowerVMLPAR() Machine {
	// cpu = thread*4 + core: node0 has cores 0-1, node1 cores 2-3.
	m := Machine{
		Sockets: 1, CoresPerSocket: 4, ThreadsPerCore: 4,
		OfflineCPUs: []int{13},
		Nodes: []Node{
			{CPUs: []int{0, 1, 4, 5, 8, 9, 12, 13}, MemTotalKB: 8388608, HugePages: map[int]int{kb2M: 64}},
			{CPUs: []int{2, 3, 6, 7, 10, 11, 14, 15}, MemTotalKB: 8388608, HugePages: map[int]int{kb2M: 64}},
		},
		MemoryBlockSize: 256 * mib, MemoryBlocks: Blocks(64),
		HugePageSizesKB: []int{kb2M},
	}
	for cpu := range m.NumCPUs() {
		if m.online(cpu) {
			m.UnknownPackageIDs = append(m.UnknownPackageIDs, cpu)
		}
	}
	return m
}

// OneNode is the small machine unit tests build: one socket of cpus cores
// (one thread each), one NUMA node with memKB of memory in 128 MiB blocks,
// and the 2048 kB hugepage size with pages2M pages on the node.
func OneNode(cpus int, memKB uint64, pages2M int) Machine {
	return Machine{
		Sockets: 1, CoresPerSocket: cpus, ThreadsPerCore: 1,
		Nodes:           []Node{{CPUs: CPUs(0, cpus-1), MemTotalKB: memKB, HugePages: map[int]int{kb2M: pages2M}}},
		MemoryBlockSize: 128 * mib, MemoryBlocks: Blocks(int(memKB * 1024 / (128 * mib))),
		HugePageSizesKB: []int{kb2M},
	}
}
