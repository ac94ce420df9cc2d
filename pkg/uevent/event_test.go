package uevent

import (
	"bytes"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// datagram builds a uevent datagram the way the kernel does: the header,
// then every field, each ended by a NUL.
func datagram(header string, fields ...string) []byte {
	var b bytes.Buffer
	b.WriteString(header)
	b.WriteByte(0)
	for _, f := range fields {
		b.WriteString(f)
		b.WriteByte(0)
	}
	return b.Bytes()
}

func TestParse(t *testing.T) {
	huge := strings.Repeat("x", 1<<20)
	tests := []struct {
		name    string
		in      []byte
		want    Event
		wantErr string // substring of the error; empty means no error
	}{
		{
			name: "cpu offline",
			in: datagram("offline@/devices/system/cpu/cpu1",
				"ACTION=offline", "DEVPATH=/devices/system/cpu/cpu1", "SUBSYSTEM=cpu",
				"MODALIAS=cpu:type:x86,ven0000fam0006mod008F:feature:,0000,0001", "SEQNUM=1924"),
			want: Event{
				Action: ActionOffline, DevPath: "/devices/system/cpu/cpu1", Subsystem: "cpu", Seqnum: 1924,
				Env: map[string]string{
					"ACTION": "offline", "DEVPATH": "/devices/system/cpu/cpu1", "SUBSYSTEM": "cpu",
					"MODALIAS": "cpu:type:x86,ven0000fam0006mod008F:feature:,0000,0001", "SEQNUM": "1924",
				},
			},
		},
		{
			name: "synthetic memory online",
			in: datagram("online@/devices/system/memory/memory0",
				"ACTION=online", "DEVPATH=/devices/system/memory/memory0", "SUBSYSTEM=memory",
				"SYNTH_UUID=0", "SEQNUM=1927"),
			want: Event{
				Action: ActionOnline, DevPath: "/devices/system/memory/memory0", Subsystem: "memory",
				Seqnum: 1927, Synthetic: true,
				Env: map[string]string{
					"ACTION": "online", "DEVPATH": "/devices/system/memory/memory0", "SUBSYSTEM": "memory",
					"SYNTH_UUID": "0", "SEQNUM": "1927",
				},
			},
		},
		{
			name: "values with =",
			in:   datagram("change@/devices/x", "SUBSYSTEM=x", "A==", "B=k=v=w", "C="),
			want: Event{
				Action: ActionChange, DevPath: "/devices/x", Subsystem: "x",
				Env: map[string]string{"SUBSYSTEM": "x", "A": "=", "B": "k=v=w", "C": ""},
			},
		},
		{
			name: "empty env",
			in:   []byte("add@/devices/x"),
			want: Event{Action: ActionAdd, DevPath: "/devices/x", Env: map[string]string{}},
		},
		{
			name: "header only with NUL",
			in:   []byte("add@/devices/x\x00"),
			want: Event{Action: ActionAdd, DevPath: "/devices/x", Env: map[string]string{}},
		},
		{
			name: "trailing NULs",
			in:   []byte("remove@/devices/x\x00SEQNUM=7\x00\x00\x00\x00"),
			want: Event{Action: ActionRemove, DevPath: "/devices/x", Seqnum: 7, Env: map[string]string{"SEQNUM": "7"}},
		},
		{
			name: "empty fields in between",
			in:   []byte("add@/devices/x\x00\x00A=1\x00\x00B=2"),
			want: Event{Action: ActionAdd, DevPath: "/devices/x", Env: map[string]string{"A": "1", "B": "2"}},
		},
		{
			name: "repeated key keeps the last value",
			in:   datagram("add@/devices/x", "A=1", "A=2"),
			want: Event{Action: ActionAdd, DevPath: "/devices/x", Env: map[string]string{"A": "2"}},
		},
		{
			name: "@ in the device path",
			in:   datagram("bind@/devices/platform/soc@0", "DEVPATH=/devices/platform/soc@0"),
			want: Event{
				Action: ActionBind, DevPath: "/devices/platform/soc@0",
				Env: map[string]string{"DEVPATH": "/devices/platform/soc@0"},
			},
		},
		{
			name: "unknown action is kept",
			in:   datagram("wiggle@/devices/x", "ACTION=wiggle"),
			want: Event{Action: "wiggle", DevPath: "/devices/x", Env: map[string]string{"ACTION": "wiggle"}},
		},
		{
			name: "largest SEQNUM",
			in:   datagram("add@/x", "SEQNUM=18446744073709551615"),
			want: Event{Action: ActionAdd, DevPath: "/x", Seqnum: 1<<64 - 1, Env: map[string]string{"SEQNUM": "18446744073709551615"}},
		},
		{
			name: "huge value",
			in:   datagram("change@/devices/x", "BIG="+huge),
			want: Event{Action: ActionChange, DevPath: "/devices/x", Env: map[string]string{"BIG": huge}},
		},
		{name: "nil", in: nil, wantErr: "empty datagram"},
		{name: "only NULs", in: []byte("\x00\x00"), wantErr: "empty datagram"},
		{name: "missing @", in: datagram("add/devices/x", "ACTION=add"), wantErr: `header "add/devices/x" has no '@'`},
		{name: "udevd's group", in: []byte("libudev\x00\xfe\xed\xca\xfe"), wantErr: "has no '@'"},
		{name: "no action", in: datagram("@/devices/x"), wantErr: "has no action"},
		{name: "no device path", in: datagram("add@"), wantErr: "has no device path"},
		{name: "field without =", in: datagram("add@/x", "ACTION=add", "JUNK"), wantErr: `field "JUNK" is not KEY=VALUE`},
		{name: "empty key", in: datagram("add@/x", "=v"), wantErr: `field "=v" is not KEY=VALUE`},
		{name: "ACTION contradicts header", in: datagram("add@/x", "ACTION=remove"), wantErr: "ACTION=\"remove\" contradicts"},
		{name: "DEVPATH contradicts header", in: datagram("add@/x", "DEVPATH=/y"), wantErr: "DEVPATH=\"/y\" contradicts"},
		{name: "SEQNUM not a number", in: datagram("add@/x", "SEQNUM=12a"), wantErr: `SEQNUM="12a" is not a number`},
		{name: "SEQNUM negative", in: datagram("add@/x", "SEQNUM=-1"), wantErr: "is not a number"},
		{name: "SEQNUM too large", in: datagram("add@/x", "SEQNUM=18446744073709551616"), wantErr: "is not a number"},
		{name: "SEQNUM empty", in: datagram("add@/x", "SEQNUM="), wantErr: "is not a number"},
		{name: "huge header without @", in: []byte(huge), wantErr: `"` + strings.Repeat("x", maxQuote) + `"... has no '@'`},
		{name: "huge malformed field", in: datagram("add@/x", huge), wantErr: `"` + strings.Repeat("x", maxQuote) + `"... is not KEY=VALUE`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := Parse(tt.in)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Parse() error = %v, want one containing %q", err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "uevent: parse: ") {
					t.Errorf("Parse() error %q does not name the package and operation", err)
				}
				if len(err.Error()) > 4*maxQuote+100 {
					t.Errorf("Parse() error is %d bytes long", len(err.Error()))
				}
				return
			}
			if err != nil {
				t.Fatalf("Parse() error: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("unexpected event (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseDoesNotKeepInput(t *testing.T) {
	b := datagram("add@/devices/system/cpu/cpu1", "SUBSYSTEM=cpu", "SEQNUM=1")
	e, err := Parse(b)
	if err != nil {
		t.Fatal(err)
	}
	for i := range b {
		b[i] = 'z'
	}
	if e.DevPath != "/devices/system/cpu/cpu1" || e.Subsystem != "cpu" || e.Env["SEQNUM"] != "1" {
		t.Errorf("event changed with its input buffer: %+v", e)
	}
}

func TestRelevant(t *testing.T) {
	tests := []struct {
		subsystem string
		action    Action
		want      bool
	}{
		{"cpu", ActionAdd, true},
		{"cpu", ActionRemove, true},
		{"cpu", ActionOnline, true},
		{"cpu", ActionOffline, true},
		{"cpu", ActionBind, true},
		{"cpu", ActionUnbind, true},
		{"cpu", ActionChange, false},
		{"cpu", ActionMove, false},
		{"memory", ActionAdd, true},
		{"memory", ActionRemove, true},
		{"memory", ActionOnline, true},
		{"memory", ActionOffline, true},
		{"memory", ActionChange, false},
		{"memory", ActionBind, false},
		{"node", ActionAdd, true},
		{"node", ActionRemove, true},
		{"node", ActionOnline, true},
		{"node", ActionOffline, true},
		{"node", ActionChange, false},
		{"cpuid", ActionAdd, false},
		{"cpuid", ActionRemove, false},
		{"msr", ActionAdd, false},
		{"thermal", ActionChange, false},
		{"machinecheck", ActionAdd, false},
		{"", ActionAdd, false},
		{"CPU", ActionAdd, false},
		{"cpu", "ADD", false},
	}
	for _, tt := range tests {
		t.Run(tt.subsystem+"/"+string(tt.action), func(t *testing.T) {
			e := Event{Action: tt.action, Subsystem: tt.subsystem, DevPath: "/devices/x"}
			if got := e.Relevant(); got != tt.want {
				t.Errorf("Relevant() = %v, want %v", got, tt.want)
			}
		})
	}
}

// TestParseRealDatagrams parses the datagrams captured on the project's
// machine (Linux 6.18), which also seed FuzzParse.
func TestParseRealDatagrams(t *testing.T) {
	type summary struct {
		Action    Action
		DevPath   string
		Subsystem string
		Seqnum    uint64
		Synthetic bool
		Relevant  bool
		Keys      []string
	}
	tests := []struct {
		file string
		want summary
	}{
		{"real-cpu1-offline", summary{ActionOffline, "/devices/system/cpu/cpu1", "cpu", 1924, false, true,
			[]string{"ACTION", "DEVPATH", "MODALIAS", "SEQNUM", "SUBSYSTEM"}}},
		{"real-cpu1-online", summary{ActionOnline, "/devices/system/cpu/cpu1", "cpu", 1926, false, true,
			[]string{"ACTION", "DEVPATH", "MODALIAS", "SEQNUM", "SUBSYSTEM"}}},
		{"real-cpuid-remove", summary{ActionRemove, "/devices/virtual/cpuid/cpu1", "cpuid", 1923, false, false,
			[]string{"ACTION", "DEVNAME", "DEVPATH", "MAJOR", "MINOR", "SEQNUM", "SUBSYSTEM"}}},
		{"real-cpuid-add", summary{ActionAdd, "/devices/virtual/cpuid/cpu1", "cpuid", 1925, false, false,
			[]string{"ACTION", "DEVNAME", "DEVPATH", "MAJOR", "MINOR", "SEQNUM", "SUBSYSTEM"}}},
		{"real-memory0-online-synth", summary{ActionOnline, "/devices/system/memory/memory0", "memory", 1927, true, true,
			[]string{"ACTION", "DEVPATH", "SEQNUM", "SUBSYSTEM", "SYNTH_UUID"}}},
		{"real-memory1-add-synth", summary{ActionAdd, "/devices/system/memory/memory1", "memory", 1928, true, true,
			[]string{"ACTION", "DEVPATH", "SEQNUM", "SUBSYSTEM", "SYNTH_UUID"}}},
		{"real-memory2-offline-synth", summary{ActionOffline, "/devices/system/memory/memory2", "memory", 1929, true, true,
			[]string{"ACTION", "DEVPATH", "SEQNUM", "SUBSYSTEM", "SYNTH_UUID"}}},
		{"real-memory4-remove-synth", summary{ActionRemove, "/devices/system/memory/memory4", "memory", 1930, true, true,
			[]string{"ACTION", "DEVPATH", "SEQNUM", "SUBSYSTEM", "SYNTH_UUID"}}},
		{"real-memory3-change-synth-args", summary{ActionChange, "/devices/system/memory/memory3", "memory", 1931, true, false,
			[]string{"ACTION", "DEVPATH", "SEQNUM", "SUBSYSTEM", "SYNTH_ARG_A", "SYNTH_ARG_Bee", "SYNTH_UUID"}}},
		{"real-node0-add-synth", summary{ActionAdd, "/devices/system/node/node0", "node", 1932, true, true,
			[]string{"ACTION", "DEVPATH", "SEQNUM", "SUBSYSTEM", "SYNTH_UUID"}}},
		{"real-cpu0-add-synth", summary{ActionAdd, "/devices/system/cpu/cpu0", "cpu", 1933, true, true,
			[]string{"ACTION", "DEVPATH", "MODALIAS", "SEQNUM", "SUBSYSTEM", "SYNTH_UUID"}}},
	}
	for _, tt := range tests {
		t.Run(tt.file, func(t *testing.T) {
			b := readCorpusFile(t, filepath.Join("testdata", "fuzz", "FuzzParse", tt.file))
			e, err := Parse(b)
			if err != nil {
				t.Fatalf("Parse() error: %v", err)
			}
			keys := make([]string, 0, len(e.Env))
			for k := range e.Env {
				keys = append(keys, k)
			}
			sort.Strings(keys)
			got := summary{e.Action, e.DevPath, e.Subsystem, e.Seqnum, e.Synthetic, e.Relevant(), keys}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("unexpected event (-want +got):\n%s", diff)
			}
		})
	}
}

// readCorpusFile reads a one-value []byte file in the Go fuzzing corpus
// format ("go test fuzz v1").
func readCorpusFile(t *testing.T, path string) []byte {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	header, value, ok := strings.Cut(strings.TrimSpace(string(raw)), "\n")
	if !ok || header != "go test fuzz v1" {
		t.Fatalf("%s: not a Go fuzzing corpus file", path)
	}
	lit, prefixed := strings.CutPrefix(value, "[]byte(")
	lit, suffixed := strings.CutSuffix(lit, ")")
	if !prefixed || !suffixed {
		t.Fatalf("%s: value %.40q is not a []byte", path, value)
	}
	s, err := strconv.Unquote(lit)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return []byte(s)
}
