package topology

import (
	"errors"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParseCPUList(t *testing.T) {
	tests := []struct {
		in      string
		want    []int
		wantErr bool
	}{
		{in: "0-1\n", want: []int{0, 1}},
		{in: "0-3,8-11\n", want: []int{0, 1, 2, 3, 8, 9, 10, 11}},
		{in: "5", want: []int{5}},
		{in: "\n", want: []int{}},
		{in: "", want: []int{}},
		{in: "0-", wantErr: true},
		{in: "3-1", wantErr: true},
		{in: "a", wantErr: true},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			got, err := parseCPUList([]byte(tt.in))
			if (err != nil) != tt.wantErr {
				t.Fatalf("parseCPUList(%q) error = %v, wantErr %v", tt.in, err, tt.wantErr)
			}
			if tt.wantErr {
				return
			}
			if diff := cmp.Diff(tt.want, got.List()); diff != "" {
				t.Errorf("parseCPUList(%q) (-want +got):\n%s", tt.in, diff)
			}
		})
	}
}

func TestParseMeminfo(t *testing.T) {
	tests := []struct {
		name    string
		in      string
		want    meminfo
		wantErr error
	}{
		{
			name: "proc",
			in:   "MemTotal:       24684092 kB\nMemFree:        20000000 kB\nHugePages_Total:       0\nHugepagesize:       2048 kB\n",
			want: meminfo{memTotalKiB: 24684092, hugePageSizeKiB: 2048},
		},
		{
			name: "node",
			in:   "Node 0 MemTotal:        7694548 kB\nNode 0 MemFree:         3320808 kB\n",
			want: meminfo{memTotalKiB: 7694548},
		},
		{name: "no MemTotal", in: "MemFree: 1 kB\n", wantErr: errNoMemTotal},
		{name: "empty", in: "", wantErr: errNoMemTotal},
		{name: "no unit", in: "MemTotal: 12\n", wantErr: errMalformed},
		{name: "not a number", in: "MemTotal: x kB\n", wantErr: errMalformed},
		{name: "bad Hugepagesize", in: "MemTotal: 1 kB\nHugepagesize: 2 MB\n", wantErr: errMalformed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseMeminfo([]byte(tt.in))
			if !errors.Is(err, tt.wantErr) {
				t.Fatalf("parseMeminfo() error = %v, want %v", err, tt.wantErr)
			}
			if diff := cmp.Diff(tt.want, got, cmp.AllowUnexported(meminfo{})); diff != "" {
				t.Errorf("parseMeminfo() (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseHugePageDir(t *testing.T) {
	tests := []struct {
		in     string
		want   uint64
		wantOK bool
	}{
		{"hugepages-2048kB", 2048, true},
		{"hugepages-1048576kB", 1048576, true},
		{"hugepages-64kB", 64, true},
		{"hugepages-0kB", 0, false},
		{"hugepages-2MB", 0, false},
		{"nr_hugepages", 0, false},
		{"hugepages-kB", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseHugePageDir(tt.in)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseHugePageDir(%q) = %d, %v; want %d, %v", tt.in, got, ok, tt.want, tt.wantOK)
		}
	}
}

func TestParseNumbers(t *testing.T) {
	tests := []struct {
		name    string
		parse   func([]byte) (uint64, error)
		in      string
		want    uint64
		wantErr bool
	}{
		{"uint", parseUint, "512\n", 512, false},
		{"uint negative", parseUint, "-1\n", 0, true},
		{"uint empty", parseUint, "\n", 0, true},
		{"hex 128Mi", parseHex, "8000000\n", 128 << 20, false},
		{"hex 2Gi", parseHex, "80000000\n", 2 << 30, false},
		{"hex 0x", parseHex, "0x8000000", 128 << 20, false},
		{"hex bad", parseHex, "zz\n", 0, true},
		{"int", func(b []byte) (uint64, error) { v, err := parseInt(b); return uint64(v), err }, "7\n", 7, false},
		{"int bad", func(b []byte) (uint64, error) { v, err := parseInt(b); return uint64(v), err }, "7a\n", 0, true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := tt.parse([]byte(tt.in))
			if (err != nil) != tt.wantErr || (!tt.wantErr && got != tt.want) {
				t.Errorf("parse(%q) = %d, %v; want %d, error %v", tt.in, got, err, tt.want, tt.wantErr)
			}
		})
	}
}

func TestParseIndexedName(t *testing.T) {
	tests := []struct {
		name, prefix string
		want         int
		wantOK       bool
	}{
		{"cpu12", "cpu", 12, true},
		{"cpufreq", "cpu", 0, false},
		{"cpu", "cpu", 0, false},
		{"node3", "node", 3, true},
		{"memory1024", "memory", 1024, true},
		{"cpu-1", "cpu", 0, false},
		{"cpu1234567890", "cpu", 0, false},
	}
	for _, tt := range tests {
		got, ok := parseIndexedName([]byte(tt.name), tt.prefix)
		if got != tt.want || ok != tt.wantOK {
			t.Errorf("parseIndexedName(%q, %q) = %d, %v; want %d, %v", tt.name, tt.prefix, got, ok, tt.want, tt.wantOK)
		}
	}
}
