package cpumgr

import (
	"math/bits"

	"k8s.io/utils/cpuset"
)

// bitset is a set of CPU ids for the checks over every assignment, where
// cpuset's map-based operations would allocate a set per step.
type bitset []uint64

func (b *bitset) add(cpu int) {
	w := cpu / 64
	if w >= len(*b) {
		*b = append(*b, make([]uint64, w+1-len(*b))...)
	}
	(*b)[w] |= 1 << (cpu % 64)
}

func (b bitset) has(cpu int) bool {
	w := cpu / 64
	return w < len(b) && b[w]&(1<<(cpu%64)) != 0
}

// addSet adds every CPU of s and reports whether any was there already.
func (b *bitset) addSet(s cpuset.CPUSet) (overlap bool) {
	for _, cpu := range s.UnsortedList() {
		overlap = overlap || b.has(cpu)
		b.add(cpu)
	}
	return overlap
}

func toBits(s cpuset.CPUSet) bitset {
	var b bitset
	b.addSet(s)
	return b
}

func (b bitset) equal(o bitset) bool {
	n := max(len(b), len(o))
	for i := range n {
		var x, y uint64
		if i < len(b) {
			x = b[i]
		}
		if i < len(o) {
			y = o[i]
		}
		if x != y {
			return false
		}
	}
	return true
}

func (b bitset) set() cpuset.CPUSet {
	var ids []int
	for w, word := range b {
		for word != 0 {
			i := bits.TrailingZeros64(word)
			ids = append(ids, w*64+i)
			word &^= 1 << i
		}
	}
	return cpuset.New(ids...)
}

// andNot returns the CPUs of b that are not in o.
func (b bitset) andNot(o bitset) bitset {
	out := make(bitset, len(b))
	for i, w := range b {
		if i < len(o) {
			w &^= o[i]
		}
		out[i] = w
	}
	return out
}

// without returns b less the CPUs of s.
func (b bitset) without(s cpuset.CPUSet) bitset {
	return b.andNot(toBits(s))
}
