package checksum

import "testing"

// TestOf: FNV-32a, as the kubelet's checksum.New hashes a dump.
func TestOf(t *testing.T) {
	for _, tt := range []struct {
		dump string
		want uint64
	}{
		{"", 2166136261},
		{"a", 0xe40c292c},
	} {
		if got := Of(tt.dump); got != tt.want {
			t.Errorf("Of(%q) = %d, want %d", tt.dump, got, tt.want)
		}
	}
}
