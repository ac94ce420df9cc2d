package fixturegen

import (
	"bytes"
	"fmt"
	"math/bits"
)

// usage is a plausible split of a memory total, in kB.
type usage struct {
	total, free, used, file, anon, shmem, mapped, slab, sreclaim, kstack, pagetables, hugetlb uint64
}

// newUsage models a mostly idle machine: 2% of the memory outside hugepages
// in use, the rest free.
func newUsage(total, hugetlb uint64) usage {
	u := usage{total: total, hugetlb: hugetlb, used: total / 50}
	u.free = total - min(total, u.used+hugetlb)
	u.file, u.anon, u.slab = u.used*2/5, u.used/5, u.used/10
	u.shmem, u.mapped, u.sreclaim = u.file/20, u.file/10, u.slab*7/10
	u.kstack, u.pagetables = u.used/100, u.used/100
	return u
}

// hugetlbKB is the memory held by the given hugepage counts.
func hugetlbKB(counts map[int]int) uint64 {
	var kb uint64
	for size, nr := range counts {
		kb += uint64(size) * uint64(nr)
	}
	return kb
}

type kv struct {
	key string
	kb  uint64
}

func (u usage) common() []kv {
	return []kv{
		{"Active", u.file/4 + u.anon/2}, {"Inactive", u.file*3/4 + u.anon/2},
		{"Active(anon)", u.anon / 2}, {"Inactive(anon)", u.anon / 2},
		{"Active(file)", u.file / 4}, {"Inactive(file)", u.file * 3 / 4},
		{"Unevictable", 0}, {"Mlocked", 0},
	}
}

// nodeMeminfo renders nodeN/meminfo as drivers/base/node.c does.
func (m Machine) nodeMeminfo(id int) []byte {
	nd := m.Nodes[id]
	u := newUsage(nd.MemTotalKB, hugetlbKB(nd.HugePages))
	lines := append([]kv{{"MemTotal", u.total}, {"MemFree", u.free}, {"MemUsed", u.total - u.free}, {"SwapCached", 0}}, u.common()...)
	lines = append(lines, []kv{
		{"Dirty", 0}, {"Writeback", 0}, {"FilePages", u.file}, {"Mapped", u.mapped},
		{"AnonPages", u.anon}, {"Shmem", u.shmem}, {"KernelStack", u.kstack},
		{"PageTables", u.pagetables}, {"SecPageTables", 0}, {"NFS_Unstable", 0},
		{"Bounce", 0}, {"WritebackTmp", 0}, {"KReclaimable", u.sreclaim},
		{"Slab", u.slab}, {"SReclaimable", u.sreclaim}, {"SUnreclaim", u.slab - u.sreclaim},
		{"AnonHugePages", 0}, {"ShmemHugePages", 0}, {"ShmemPmdMapped", 0},
		{"FileHugePages", 0}, {"FilePmdMapped", 0},
	}...)
	var b bytes.Buffer
	for _, l := range lines {
		fmt.Fprintf(&b, "Node %d %-16s%8d kB\n", id, l.key+":", l.kb)
	}
	if def := m.defaultHugePageKB(); def != 0 {
		nr := nd.HugePages[def]
		fmt.Fprintf(&b, "Node %d HugePages_Total: %5d\nNode %d HugePages_Free:  %5d\nNode %d HugePages_Surp:  %5d\n", id, nr, id, nr, id, 0)
	}
	return b.Bytes()
}

// meminfo renders /proc/meminfo as fs/proc/meminfo.c does.
func (m Machine) meminfo() []byte {
	total := m.MemTotalKB
	var hugetlb uint64
	for _, nd := range m.Nodes {
		if m.MemTotalKB == 0 {
			total += nd.MemTotalKB
		}
		hugetlb += hugetlbKB(nd.HugePages)
	}
	u := newUsage(total, hugetlb)
	buffers := u.file / 10
	lines := []kv{
		{"MemTotal", u.total}, {"MemFree", u.free}, {"MemAvailable", u.free + u.file/2 + u.sreclaim/2},
		{"Buffers", buffers}, {"Cached", u.file - buffers}, {"SwapCached", 0},
	}
	lines = append(lines, u.common()...)
	lines = append(lines, []kv{
		{"SwapTotal", 0}, {"SwapFree", 0}, {"Zswap", 0}, {"Zswapped", 0},
		{"Dirty", 0}, {"Writeback", 0}, {"AnonPages", u.anon}, {"Mapped", u.mapped},
		{"Shmem", u.shmem}, {"KReclaimable", u.sreclaim}, {"Slab", u.slab},
		{"SReclaimable", u.sreclaim}, {"SUnreclaim", u.slab - u.sreclaim},
		{"KernelStack", u.kstack}, {"PageTables", u.pagetables}, {"SecPageTables", 0},
		{"NFS_Unstable", 0}, {"Bounce", 0}, {"WritebackTmp", 0},
		{"CommitLimit", (u.total - min(u.total, hugetlb)) / 2}, {"Committed_AS", u.anon * 4},
		{"VmallocTotal", 34359738367}, {"VmallocUsed", 14220}, {"VmallocChunk", 0},
		{"Percpu", 344 * uint64(m.NumCPUs())}, {"AnonHugePages", 0}, {"ShmemHugePages", 0},
		{"ShmemPmdMapped", 0}, {"FileHugePages", 0}, {"FilePmdMapped", 0}, {"Balloon", 0},
	}...)
	var b bytes.Buffer
	for _, l := range lines {
		fmt.Fprintf(&b, "%-16s%8d kB\n", l.key+":", l.kb)
	}
	if def := m.defaultHugePageKB(); def != 0 {
		nr := m.globalHugePages(def)
		fmt.Fprintf(&b, "HugePages_Total:   %5d\nHugePages_Free:    %5d\nHugePages_Rsvd:    %5d\nHugePages_Surp:    %5d\n", nr, nr, 0, 0)
		fmt.Fprintf(&b, "Hugepagesize:   %8d kB\nHugetlb:        %8d kB\n", def, hugetlb)
	}
	// The direct map covers all memory, mostly with 1 GiB pages.
	const g = 1 << 20
	direct := total + total/64
	for _, l := range []kv{{"DirectMap4k", 28672}, {"DirectMap2M", direct % g / 2048 * 2048}, {"DirectMap1G", direct / g * g}} {
		fmt.Fprintf(&b, "%-16s%8d kB\n", l.key+":", l.kb)
	}
	return b.Bytes()
}

// cpuinfo renders /proc/cpuinfo: one stanza per online CPU, as
// arch/x86/kernel/cpu/proc.c prints it for a Sapphire Rapids server.
func (m Machine) cpuinfo() []byte {
	threadBits := bits.Len(uint(m.ThreadsPerCore - 1))
	coreBits := bits.Len(uint(m.CoresPerSocket - 1))
	var b bytes.Buffer
	for _, cpu := range m.onlineWhere(func(int) bool { return true }) {
		l := m.loc(cpu)
		pkg := m.onlineWhere(func(o int) bool { return m.loc(o).socket == l.socket })
		cores := map[int]bool{}
		for _, o := range pkg {
			cores[m.loc(o).core] = true
		}
		apic := l.socket<<(coreBits+threadBits) | l.core<<threadBits | l.thread
		pkgID, coreID := m.ids(cpu)
		fmt.Fprintf(&b, "processor\t: %d\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\n"+
			"model name\t: Intel(R) Xeon(R) Platinum 8480+\nstepping\t: 8\nmicrocode\t: 0x2b000571\n"+
			"cpu MHz\t\t: 2000.000\ncache size\t: 107520 KB\nphysical id\t: %d\nsiblings\t: %d\n"+
			"core id\t\t: %d\ncpu cores\t: %d\napicid\t\t: %d\ninitial apicid\t: %d\n"+
			"fpu\t\t: yes\nfpu_exception\t: yes\ncpuid level\t: 32\nwp\t\t: yes\n"+
			"flags\t\t: %s\nbugs\t\t: spectre_v1 spectre_v2 spec_store_bypass swapgs eibrs_pbrsb\n"+
			"bogomips\t: 4000.00\nclflush size\t: 64\ncache_alignment\t: 64\n"+
			"address sizes\t: 46 bits physical, 57 bits virtual\npower management:\n\n",
			cpu, pkgID, len(pkg), coreID, len(cores), apic, apic, cpuFlags)
	}
	return b.Bytes()
}

const cpuFlags = "fpu vme de pse tsc msr pae mce cx8 apic sep mtrr pge mca cmov pat pse36 clflush dts acpi mmx fxsr sse sse2 ss ht tm pbe syscall nx pdpe1gb rdtscp lm constant_tsc arch_perfmon pebs bts rep_good nopl xtopology nonstop_tsc cpuid aperfmperf tsc_known_freq pni pclmulqdq dtes64 monitor ds_cpl vmx smx est tm2 ssse3 sdbg fma cx16 xtpr pdcm pcid dca sse4_1 sse4_2 x2apic movbe popcnt tsc_deadline_timer aes xsave avx f16c rdrand lahf_lm abm 3dnowprefetch cpuid_fault epb cat_l3 cat_l2 cdp_l3 intel_ppin cdp_l2 ssbd mba ibrs ibpb stibp ibrs_enhanced tpr_shadow flexpriority ept vpid ept_ad fsgsbase tsc_adjust bmi1 hle avx2 smep bmi2 erms invpcid rtm cqm rdt_a avx512f avx512dq rdseed adx smap avx512ifma clflushopt clwb intel_pt avx512cd sha_ni avx512bw avx512vl xsaveopt xsavec xgetbv1 xsaves cqm_llc cqm_occup_llc cqm_mbm_total cqm_mbm_local split_lock_detect avx_vnni avx512_bf16 wbnoinvd dtherm ida arat pln pts hfi vnmi avx512vbmi umip pku ospke waitpkg avx512_vbmi2 gfni vaes vpclmulqdq avx512_vnni avx512_bitalg tme avx512_vpopcntdq la57 rdpid bus_lock_detect cldemote movdiri movdir64b enqcmd fsrm md_clear serialize tsxldtrk pconfig arch_lbr ibt amx_bf16 avx512_fp16 amx_tile amx_int8 flush_l1d arch_capabilities"
