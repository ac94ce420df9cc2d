package journal

import (
	"os"
	"regexp"
	"slices"
	"testing"
)

// TestOutcomes: Outcomes lists every outcome constant once (the metrics'
// zero series come from it).
func TestOutcomes(t *testing.T) {
	src, err := os.ReadFile("journal.go")
	if err != nil {
		t.Fatal(err)
	}
	declared := regexp.MustCompile(`(?m)^\s*Outcome\w+\s+(?:Outcome\s+)?= "(\w+)"`).FindAllStringSubmatch(string(src), -1)
	var want []string
	for _, m := range declared {
		want = append(want, m[1])
	}
	var got []string
	for _, o := range Outcomes() {
		got = append(got, string(o))
	}
	if len(want) < 8 || !slices.Equal(got, want) {
		t.Errorf("Outcomes() = %q, want the declared %q", got, want)
	}
}
