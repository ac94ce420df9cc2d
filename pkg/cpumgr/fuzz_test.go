package cpumgr

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
)

// FuzzParse feeds Parse arbitrary bytes, seeded with the golden files. Parse
// must not panic; what it reads, Marshal writes, and reading that again
// gives the same state and the same bytes (the kubelet's writes are a fixed
// point).
func FuzzParse(f *testing.F) {
	files, err := filepath.Glob(filepath.Join("testdata", "*.cpu_manager_state"))
	if err != nil {
		f.Fatal(err)
	}
	for _, name := range files {
		b, err := os.ReadFile(name)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte(`{"policyName":"static","defaultCpuSet":"0-3","entries":null,"checksum":0}`))
	f.Add([]byte(`{"policyName":"static","defaultCpuSet":"0-7","checksum":0,"data":"{}","dataChecksum":1}`))
	f.Add([]byte(`{"policyName":"static","defaultCpuSet":"0-1","entries":{"containerd://0123":"2-3"},"checksum":0}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		s, err := Parse(b)
		if err != nil {
			return
		}
		out, err := s.Marshal()
		if err != nil {
			t.Fatalf("Marshal() of a parsed state: %v", err)
		}
		again, err := Parse(out)
		if err != nil {
			t.Fatalf("Parse(Marshal()) error: %v\nin:  %q\nout: %q", err, b, out)
		}
		want := s.Format
		if want == FormatV1 {
			want = FormatV2
		}
		if again.Format != want || !equalContent(s, again) {
			t.Fatalf("Parse(Marshal()) = %+v, want %+v\nout: %q", again, s, out)
		}
		out2, err := again.Marshal()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("Marshal() is not a fixed point: %q, then %q (%v)", out, out2, err)
		}
	})
}
