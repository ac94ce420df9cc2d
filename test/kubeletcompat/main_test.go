package kubeletcompat_test

import (
	"fmt"
	"os"
	"testing"
)

// TestMain removes the machine trees readTree wrote (machineTrees) after
// the tests.
func TestMain(m *testing.M) {
	code := m.Run()
	if err := machineTrees.removeAll(); err != nil {
		fmt.Fprintln(os.Stderr, "kubeletcompat: removing the machine trees:", err)
		if code == 0 {
			code = 1
		}
	}
	os.Exit(code)
}
