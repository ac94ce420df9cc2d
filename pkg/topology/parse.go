package topology

import (
	"bytes"
	"errors"
	"fmt"
	"strconv"
	"strings"

	"k8s.io/utils/cpuset"
)

// parseCPUList parses a kernel CPU list such as "0-3,8-11\n". An empty file
// is an empty set (e.g. cpu/offline when every CPU is online).
func parseCPUList(b []byte) (cpuset.CPUSet, error) {
	s, err := cpuset.Parse(strings.TrimSpace(string(b)))
	if err != nil {
		return cpuset.New(), fmt.Errorf("invalid CPU list %q: %w", bytes.TrimSpace(b), err)
	}
	return s, nil
}

// parseInt parses a single decimal integer attribute such as core_id. Values
// can be negative (die_id is -1 on some architectures).
//
// parseInt, parseUint and parseHex view b as a string without copying it (a
// snapshot parses thousands of these), and never return strconv's error,
// which would keep that view of a buffer the next read overwrites.
func parseInt(b []byte) (int, error) {
	v, err := strconv.Atoi(bytesToString(bytes.TrimSpace(b)))
	if err != nil {
		return 0, fmt.Errorf("invalid integer %q", bytes.TrimSpace(b))
	}
	return v, nil
}

// parseUint parses a single unsigned decimal attribute such as nr_hugepages.
func parseUint(b []byte) (uint64, error) {
	v, err := strconv.ParseUint(bytesToString(bytes.TrimSpace(b)), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid unsigned integer %q", bytes.TrimSpace(b))
	}
	return v, nil
}

// parseHex parses a hexadecimal attribute without 0x, such as
// memory/block_size_bytes ("8000000" for 128 MiB).
func parseHex(b []byte) (uint64, error) {
	s := strings.TrimPrefix(bytesToString(bytes.TrimSpace(b)), "0x")
	v, err := strconv.ParseUint(s, 16, 64)
	if err != nil {
		return 0, fmt.Errorf("invalid hexadecimal number %q", bytes.TrimSpace(b))
	}
	return v, nil
}

var (
	// errNoMemTotal reports a meminfo file without a MemTotal line.
	errNoMemTotal = errors.New("no MemTotal line")
	// errMalformed reports a line that is not "Key: <number> kB".
	errMalformed = errors.New("malformed line")
)

// meminfo holds the fields of /proc/meminfo or nodeN/meminfo this package uses.
type meminfo struct {
	memTotalKiB     uint64
	hugePageSizeKiB uint64 // Hugepagesize; only /proc/meminfo has it, 0 when absent
}

// parseMeminfo parses /proc/meminfo ("MemTotal:  24684092 kB") or a NUMA
// node's meminfo ("Node 0 MemTotal:  7694548 kB"): the key is the word that
// ends in a colon, the value the number after it, in kB.
func parseMeminfo(b []byte) (meminfo, error) {
	var mi meminfo
	found := false
	for len(b) > 0 {
		var line []byte
		if i := bytes.IndexByte(b, '\n'); i >= 0 {
			line, b = b[:i], b[i+1:]
		} else {
			line, b = b, nil
		}
		var dst *uint64
		switch {
		case bytes.Contains(line, []byte("MemTotal:")):
			dst = &mi.memTotalKiB
			found = true
		case bytes.HasPrefix(line, []byte("Hugepagesize:")):
			dst = &mi.hugePageSizeKiB
		default:
			continue
		}
		fields := bytes.Fields(line[bytes.IndexByte(line, ':')+1:])
		if len(fields) != 2 || string(fields[1]) != "kB" {
			return meminfo{}, fmt.Errorf("%w %q", errMalformed, line)
		}
		v, err := strconv.ParseUint(bytesToString(fields[0]), 10, 64)
		if err != nil {
			return meminfo{}, fmt.Errorf("%w %q", errMalformed, line)
		}
		*dst = v
	}
	if !found {
		return meminfo{}, errNoMemTotal
	}
	return mi, nil
}

// parseHugePageDir returns the page size in KiB named by a hugepage size
// directory, "hugepages-2048kB" -> 2048.
func parseHugePageDir(name string) (uint64, bool) {
	s, ok := strings.CutPrefix(name, "hugepages-")
	if !ok {
		return 0, false
	}
	s, ok = strings.CutSuffix(s, "kB")
	if !ok {
		return 0, false
	}
	v, err := strconv.ParseUint(s, 10, 64)
	if err != nil || v == 0 {
		return 0, false
	}
	return v, true
}

// parseIndexedName returns N for names like "cpu12", "node3", "memory1024".
func parseIndexedName(name []byte, prefix string) (int, bool) {
	s, ok := bytes.CutPrefix(name, []byte(prefix))
	if !ok || len(s) == 0 || len(s) > 9 {
		return 0, false
	}
	v := 0
	for _, c := range s {
		if c < '0' || c > '9' {
			return 0, false
		}
		v = v*10 + int(c-'0')
	}
	return v, true
}
