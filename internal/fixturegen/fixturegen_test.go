package fixturegen

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestFixtures(t *testing.T) {
	tests := []struct {
		name    string
		online  string
		offline []int
		link    [2]string // node symlink and its target; empty without NUMA
		files   map[string]string
		absent  []string
	}{
		{
			name: "dual-socket-smt2", online: "0-15\n",
			link: [2]string{"node/node1/cpu12", "../../cpu/cpu12"},
			files: map[string]string{
				"sys/devices/system/node/node0/cpulist":                     "0-3,8-11\n",
				"sys/devices/system/node/node1/cpumap":                      "f0f0\n",
				"sys/devices/system/cpu/cpu9/topology/core_id":              "1\n",
				"sys/devices/system/cpu/cpu9/topology/thread_siblings_list": "1,9\n",
				"sys/devices/system/memory/block_size_bytes":                "8000000\n",
				"sys/devices/system/memory/memory999/state":                 "online\n",
				"proc/sys/vm/nr_hugepages":                                  "768\n",
			},
		},
		{
			name: "offline-cpus", online: "0-3\n", offline: []int{4, 5, 6, 7},
			link: [2]string{"node/node0/cpu7", "../../cpu/cpu7"},
			files: map[string]string{
				"sys/devices/system/cpu/offline":                            "4-7\n",
				"sys/devices/system/node/node0/cpulist":                     "0-3\n",
				"sys/devices/system/cpu/cpu0/topology/thread_siblings_list": "0\n",
				"proc/sys/vm/nr_hugepages":                                  "0\n",
			},
		},
		{
			name: "large-448", online: "0-447\n",
			link: [2]string{"node/node7/cpu447", "../../cpu/cpu447"},
			files: map[string]string{
				"sys/devices/system/node/node7/cpulist":      "196-223,420-447\n",
				"sys/devices/system/memory/block_size_bytes": "80000000\n",
				"sys/devices/system/memory/memory383/state":  "offline\n",
				"sys/devices/system/memory/memory3071/state": "offline\n",
				"sys/devices/system/memory/memory3069/state": "online\n",
			},
			absent: []string{"sys/devices/system/memory/memory3072"},
		},
		{
			name: "no-numa", online: "0-2\n", offline: []int{3},
			files: map[string]string{"proc/sys/vm/nr_hugepages": "128\n"},
			absent: []string{
				"sys/devices/system/node",
				"sys/kernel/mm/hugepages/hugepages-1048576kB",
			},
		},
		{
			// Not checked in: every physical_package_id reads -1.
			name: "powervm-lpar", online: "0-12,14-15\n", offline: []int{13},
			link: [2]string{"node/node0/cpu13", "../../cpu/cpu13"},
			files: map[string]string{
				"sys/devices/system/node/node1/cpulist":                     "2-3,6-7,10-11,14-15\n",
				"sys/devices/system/cpu/cpu0/topology/physical_package_id":  "-1\n",
				"sys/devices/system/cpu/cpu15/topology/physical_package_id": "-1\n",
				"sys/devices/system/cpu/cpu15/topology/core_id":             "3\n",
				"sys/devices/system/cpu/cpu9/topology/thread_siblings_list": "1,5,9\n",
			},
		},
		{
			name: "no-hugepages", online: "0-1\n",
			link: [2]string{"node/node0/cpu1", "../../cpu/cpu1"},
			absent: []string{
				"sys/kernel/mm/hugepages",
				"sys/devices/system/node/node0/hugepages",
				"proc/sys/vm/nr_hugepages",
			},
		},
	}
	machines := map[string]Machine{}
	for _, f := range Fixtures() {
		machines[f.Name] = f.Machine
	}
	machines["powervm-lpar"] = PowerVMLPAR()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m, ok := machines[tt.name]
			if !ok {
				t.Fatalf("no fixture %q", tt.name)
			}
			dir := shmTempDir(t)
			if err := m.WriteDir(dir); err != nil {
				t.Fatal(err)
			}
			read := func(rel string) string {
				t.Helper()
				b, err := os.ReadFile(filepath.Join(dir, rel))
				if err != nil {
					t.Fatal(err)
				}
				return string(b)
			}
			exists := func(rel string) bool {
				_, err := os.Lstat(filepath.Join(dir, rel))
				return !errors.Is(err, fs.ErrNotExist)
			}
			cpu := "sys/devices/system/cpu/"
			if got := read(cpu + "online"); got != tt.online {
				t.Errorf("cpu/online = %q, want %q", got, tt.online)
			}
			if exists(cpu + "cpu0/online") {
				t.Error("cpu0/online exists; x86 has none")
			}
			for _, c := range tt.offline {
				p := cpu + "cpu" + strconv.Itoa(c)
				if got := read(p + "/online"); got != "0\n" {
					t.Errorf("%s/online = %q, want 0", p, got)
				}
				if exists(p + "/topology") {
					t.Errorf("offline %s has a topology directory", p)
				}
			}
			if tt.link[0] != "" {
				got, err := os.Readlink(filepath.Join(dir, "sys/devices/system", tt.link[0]))
				if err != nil || got != tt.link[1] {
					t.Errorf("readlink %s = %q, %v; want %q", tt.link[0], got, err, tt.link[1])
				}
			}
			for rel, want := range tt.files {
				if got := read(rel); got != want {
					t.Errorf("%s = %q, want %q", rel, got, want)
				}
			}
			for _, rel := range tt.absent {
				if exists(rel) {
					t.Errorf("%s exists", rel)
				}
			}
			// Global hugepage counts are the per-node sums; the meminfo
			// lines and vm/nr_hugepages describe the 2048 kB size.
			sizes, _ := filepath.Glob(filepath.Join(dir, "sys/kernel/mm/hugepages/hugepages-*"))
			for _, s := range sizes {
				global := atoi(t, read(strings.TrimPrefix(s, dir)+"/nr_hugepages"))
				want := 0
				for _, nd := range m.Nodes {
					want += nd.HugePages[sizeOf(t, s)]
				}
				if !m.NoNUMA {
					nodes, _ := filepath.Glob(filepath.Join(dir, "sys/devices/system/node/node*/hugepages", filepath.Base(s), "nr_hugepages"))
					sum := 0
					for _, n := range nodes {
						sum += atoi(t, read(strings.TrimPrefix(n, dir)))
					}
					if len(nodes) != len(m.Nodes) || sum != want {
						t.Errorf("%s: %d node files summing to %d, want %d summing to %d", filepath.Base(s), len(nodes), sum, len(m.Nodes), want)
					}
				}
				if global != want {
					t.Errorf("%s: global nr_hugepages %d, want %d", filepath.Base(s), global, want)
				}
				if filepath.Base(s) == "hugepages-2048kB" {
					mi := read("proc/meminfo")
					if line := "HugePages_Total: " + strings.Repeat(" ", 7-len(strconv.Itoa(want))) + strconv.Itoa(want) + "\n"; !strings.Contains(mi, line) {
						t.Errorf("proc/meminfo lacks %q", line)
					}
					if got := atoi(t, read("proc/sys/vm/nr_hugepages")); got != want {
						t.Errorf("vm/nr_hugepages = %d, want %d", got, want)
					}
				}
			}
			if len(sizes) == 0 && strings.Contains(read("proc/meminfo"), "HugePages_") {
				t.Error("proc/meminfo has HugePages lines without hugepage support")
			}
			fromDir := map[string]string{}
			err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
				if err != nil || p == dir {
					return err
				}
				rel := filepath.ToSlash(strings.TrimPrefix(p, dir+"/"))
				switch {
				case d.Type()&fs.ModeSymlink != 0:
					target, err := os.Readlink(p)
					fromDir[rel] = "-> " + target
					return err
				case d.IsDir():
					fromDir[rel+"/"] = "dir"
				default:
					data, err := os.ReadFile(p)
					fromDir[rel] = string(data)
					return err
				}
				return nil
			})
			if err != nil {
				t.Fatal(err)
			}
			var tgz bytes.Buffer
			if err := m.WriteTar(&tgz); err != nil {
				t.Fatal(err)
			}
			diff(t, "WriteTar vs WriteDir", untar(t, tgz.Bytes()), fromDir)
		})
	}
}

// TestWriteTar checks that archives are reproducible and that the checked-in
// archives are up to date.
func TestWriteTar(t *testing.T) {
	for _, f := range Fixtures() {
		t.Run(f.Name, func(t *testing.T) {
			var a, b bytes.Buffer
			if err := f.Machine.WriteTar(&a); err != nil {
				t.Fatal(err)
			}
			if err := f.Machine.WriteTar(&b); err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(a.Bytes(), b.Bytes()) {
				t.Fatal("two WriteTar runs differ")
			}
			got := untar(t, a.Bytes())
			checkedIn, err := os.ReadFile(filepath.Join("..", "..", "pkg", "topology", "testdata", "fixtures", f.Name+".tar.gz"))
			if err != nil {
				t.Fatalf("%v (run go generate ./internal/fixturegen)", err)
			}
			diff(t, "checked-in archive vs generated (run go generate ./internal/fixturegen)", untar(t, checkedIn), got)
		})
	}
}

func TestFormats(t *testing.T) {
	tests := []struct {
		cpus         []int
		nbits        int
		list, cpumap string
	}{
		{nil, 4, "\n", "0"},
		{[]int{0, 1}, 2, "0-1\n", "3"},
		{[]int{0, 1, 2, 3, 8, 9, 10, 11}, 16, "0-3,8-11\n", "0f0f"},
		{[]int{1, 3, 4, 5}, 8, "1,3-5\n", "3a"},
		{[]int{0, 32, 35}, 36, "0,32,35\n", "9,00000001"},
		{[]int{31, 63}, 64, "31,63\n", "80000000,80000000"},
	}
	for _, tt := range tests {
		if got := rangeList(tt.cpus); got != tt.list {
			t.Errorf("rangeList(%v) = %q, want %q", tt.cpus, got, tt.list)
		}
		if got := cpumap(tt.cpus, tt.nbits); got != tt.cpumap {
			t.Errorf("cpumap(%v, %d) = %q, want %q", tt.cpus, tt.nbits, got, tt.cpumap)
		}
	}
}

func TestValidate(t *testing.T) {
	ok := Machine{Sockets: 1, CoresPerSocket: 2, ThreadsPerCore: 1, Nodes: []Node{{CPUs: CPUs(0, 1)}}}
	tests := []struct {
		name   string
		mutate func(*Machine)
	}{
		{"cpu0 offline", func(m *Machine) { m.OfflineCPUs = []int{0} }},
		{"no nodes", func(m *Machine) { m.Nodes = nil }},
		{"cpu in no node", func(m *Machine) { m.Nodes[0].CPUs = []int{0} }},
		{"cpu in two nodes", func(m *Machine) { m.Nodes = append(m.Nodes, Node{CPUs: []int{1}}) }},
		{"unsupported hugepage size", func(m *Machine) { m.Nodes[0].HugePages = map[int]int{2048: 1} }},
		{"dies do not divide cores", func(m *Machine) { m.DiesPerSocket = 3 }},
		{"unknown package id of an offline cpu", func(m *Machine) {
			m.OfflineCPUs, m.UnknownPackageIDs = []int{1}, []int{1}
		}},
		{"unknown core id of no cpu", func(m *Machine) { m.UnknownCoreIDs = []int{2} }},
	}
	if err := ok.WriteTar(io.Discard); err != nil {
		t.Fatalf("valid machine: %v", err)
	}
	for _, tt := range tests {
		m := ok
		m.Nodes = []Node{{CPUs: CPUs(0, 1)}}
		tt.mutate(&m)
		if err := m.WriteTar(io.Discard); err == nil {
			t.Errorf("%s: WriteTar succeeded", tt.name)
		}
	}
}

// TestUnknownIDs checks that an unknown package or core id reads -1 in
// sysfs and in /proc/cpuinfo, and only for the CPUs named.
func TestUnknownIDs(t *testing.T) {
	m := Machine{
		Sockets: 2, CoresPerSocket: 2, ThreadsPerCore: 1,
		Nodes:             []Node{{CPUs: CPUs(0, 1)}, {CPUs: CPUs(2, 3)}},
		UnknownPackageIDs: []int{2, 3},
		UnknownCoreIDs:    []int{1, 3},
	}
	dir := shmTempDir(t)
	if err := m.WriteDir(dir); err != nil {
		t.Fatal(err)
	}
	type ids struct{ Package, Core string }
	var got, gotInfo []ids
	for cpu := range 4 {
		var id ids
		for _, f := range []struct {
			name string
			dst  *string
		}{{"physical_package_id", &id.Package}, {"core_id", &id.Core}} {
			b, err := os.ReadFile(filepath.Join(dir, "sys/devices/system/cpu", "cpu"+strconv.Itoa(cpu), "topology", f.name))
			if err != nil {
				t.Fatal(err)
			}
			*f.dst = strings.TrimSpace(string(b))
		}
		got = append(got, id)
	}
	info, err := os.ReadFile(filepath.Join(dir, "proc/cpuinfo"))
	if err != nil {
		t.Fatal(err)
	}
	for _, block := range strings.Split(strings.TrimSpace(string(info)), "\n\n") {
		var id ids
		for _, line := range strings.Split(block, "\n") {
			k, v, _ := strings.Cut(line, ":")
			switch strings.TrimSpace(k) {
			case "physical id":
				id.Package = strings.TrimSpace(v)
			case "core id":
				id.Core = strings.TrimSpace(v)
			}
		}
		gotInfo = append(gotInfo, id)
	}
	want := []ids{{"0", "0"}, {"0", "-1"}, {"-1", "0"}, {"-1", "-1"}}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unexpected sysfs ids (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(want, gotInfo); diff != "" {
		t.Errorf("unexpected /proc/cpuinfo ids (-want +got):\n%s", diff)
	}
}

func untar(t *testing.T, b []byte) map[string]string {
	t.Helper()
	zr, err := gzip.NewReader(bytes.NewReader(b))
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	tr := tar.NewReader(zr)
	for {
		h, err := tr.Next()
		if err == io.EOF {
			return out
		}
		if err != nil {
			t.Fatal(err)
		}
		switch h.Typeflag {
		case tar.TypeDir:
			out[h.Name] = "dir"
		case tar.TypeSymlink:
			out[h.Name] = "-> " + h.Linkname
		default:
			data, err := io.ReadAll(tr)
			if err != nil {
				t.Fatal(err)
			}
			out[h.Name] = string(data)
		}
	}
}

func diff(t *testing.T, what string, got, want map[string]string) {
	t.Helper()
	n := 0
	for k, w := range want {
		if g, ok := got[k]; !ok || g != w {
			n++
			if n <= 5 {
				t.Errorf("%s: %s = %q, want %q", what, k, g, w)
			}
		}
	}
	for k := range got {
		if _, ok := want[k]; !ok {
			n++
			if n <= 5 {
				t.Errorf("%s: unexpected %s", what, k)
			}
		}
	}
}

func atoi(t *testing.T, s string) int {
	t.Helper()
	n, err := strconv.Atoi(strings.TrimSpace(s))
	if err != nil {
		t.Fatal(err)
	}
	return n
}

// sizeOf returns the size in kB of a hugepages-<size>kB directory.
func sizeOf(t *testing.T, dir string) int {
	return atoi(t, strings.TrimSuffix(strings.TrimPrefix(filepath.Base(dir), "hugepages-"), "kB"))
}

// shmTempDir is t.TempDir on tmpfs when the machine has /dev/shm: the large
// machine is 19,000 files, seconds to write on a disk.
func shmTempDir(t *testing.T) string {
	t.Helper()
	if fi, err := os.Stat("/dev/shm"); err != nil || !fi.IsDir() {
		return t.TempDir()
	}
	dir, err := os.MkdirTemp("/dev/shm", "hotplugd-fixturegen-")
	if err != nil {
		return t.TempDir()
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	return dir
}
