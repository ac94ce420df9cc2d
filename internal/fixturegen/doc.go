// Package fixturegen generates synthetic but kernel-faithful sysfs and procfs
// trees for the topology tests.
//
// A Machine describes sockets, dies, cores, SMT threads, offline CPUs, NUMA
// nodes, memory blocks and hugepages. WriteTar renders it as a gzip tar with
// members rooted at sys/ and proc/, the same layout hack/capture-fixture.sh
// captures from a real machine; WriteDir renders the same tree into a
// directory. Contents follow what an x86_64 Linux 6.x kernel shows:
//
//   - CPUs are numbered like Intel firmware does: the first thread of every
//     core of every socket, then the second threads, and so on.
//   - cpu0 has no online file; other CPUs have one ("1" or "0").
//   - Offline CPUs have no topology directory, are left out of sibling lists
//     and of their node's cpulist and cpumap, but keep their node/nodeN/cpuM
//     link (x86 removes an offline CPU from node_to_cpumask, not from sysfs).
//   - CPU lists are range lists ("0-3,8-11\n"); cpumap is the kernel's
//     comma-separated 32-bit hex bitmap sized to the number of possible CPUs.
//   - meminfo files use the kernel's field widths; block_size_bytes is hex
//     without 0x.
//   - Global hugepage counts are the sums of the per-node counts;
//     /proc/sys/vm/nr_hugepages and the HugePages_* lines describe the default
//     size (2048 kB when supported).
//
// Archives are reproducible: members are sorted the way
// `tar --sort=name` sorts them, mtimes are 0, owners are 0, and the gzip
// header carries no name or time.
//
// The checked-in fixtures in pkg/topology/testdata/fixtures are regenerated
// with go generate (see cmd/fixturegen).
package fixturegen

//go:generate go run ./cmd/fixturegen -out ../../pkg/topology/testdata/fixtures
