package uevent

import (
	"bytes"
	"sort"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// FuzzParse checks that Parse never panics and that what it accepts
// round-trips: encoding the Event again and parsing that gives the same
// Event. testdata/fuzz/FuzzParse holds datagrams captured on the project's
// machine (cpu1 offline/online, cpuid, synthetic memory, node and cpu
// uevents) as seeds.
func FuzzParse(f *testing.F) {
	for _, s := range []string{
		"",
		"add@/devices/x",
		"add@/devices/x\x00A=b=c\x00\x00",
		"libudev\x00\xfe\xed\xca\xfe",
		"add@\x00SEQNUM=1",
		"@/x\x00=",
		"add@/x\x00SEQNUM=99999999999999999999",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		e, err := Parse(b)
		if err != nil {
			if e.Env != nil || e.Action != "" {
				t.Fatalf("Parse() returned %+v with error %v", e, err)
			}
			return
		}
		if e.Action == "" || strings.ContainsAny(string(e.Action), "@\x00") {
			t.Fatalf("bad action %q", e.Action)
		}
		if e.DevPath == "" || strings.Contains(e.DevPath, "\x00") {
			t.Fatalf("bad device path %q", e.DevPath)
		}
		if e.Env == nil {
			t.Fatal("nil Env")
		}
		for k, v := range e.Env {
			if k == "" || strings.ContainsAny(k, "=\x00") || strings.Contains(v, "\x00") {
				t.Fatalf("bad field %q=%q", k, v)
			}
		}
		if a, ok := e.Env["ACTION"]; ok && a != string(e.Action) {
			t.Fatalf("ACTION=%q, Action %q", a, e.Action)
		}
		if d, ok := e.Env["DEVPATH"]; ok && d != e.DevPath {
			t.Fatalf("DEVPATH=%q, DevPath %q", d, e.DevPath)
		}
		if e.Subsystem != e.Env["SUBSYSTEM"] {
			t.Fatalf("SUBSYSTEM=%q, Subsystem %q", e.Env["SUBSYSTEM"], e.Subsystem)
		}
		if _, ok := e.Env["SEQNUM"]; !ok && e.Seqnum != 0 {
			t.Fatalf("Seqnum %d without SEQNUM", e.Seqnum)
		}
		if _, ok := e.Env["SYNTH_UUID"]; ok != e.Synthetic {
			t.Fatalf("Synthetic %v, SYNTH_UUID present %v", e.Synthetic, ok)
		}

		again, err := Parse(encode(e))
		if err != nil {
			t.Fatalf("Parse(encode(%+v)) error: %v", e, err)
		}
		if diff := cmp.Diff(e, again); diff != "" {
			t.Fatalf("event does not round-trip (-first +again):\n%s", diff)
		}
	})
}

// encode makes a datagram of e the way the kernel does.
func encode(e Event) []byte {
	keys := make([]string, 0, len(e.Env))
	for k := range e.Env {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b bytes.Buffer
	b.WriteString(string(e.Action) + "@" + e.DevPath + "\x00")
	for _, k := range keys {
		b.WriteString(k + "=" + e.Env[k] + "\x00")
	}
	return b.Bytes()
}
