package hacktool

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnvOverride(t *testing.T) {
	dir := t.TempDir()
	bin := filepath.Join(dir, "kustomize")
	if err := os.WriteFile(bin, []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOTPLUGD_KUSTOMIZE", bin)
	if p, err := Path("kustomize"); err != nil || p != bin {
		t.Errorf("Path = %q, %v; want %q", p, err, bin)
	}
	notExec := filepath.Join(dir, "promtool")
	if err := os.WriteFile(notExec, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("HOTPLUGD_PROMTOOL", notExec)
	if _, err := Path("promtool"); err == nil || !strings.Contains(err.Error(), "not an executable file") {
		t.Errorf("a non-executable override: %v, want an error", err)
	}
}

func TestUnknownToolKeepsTheScriptsError(t *testing.T) {
	_, err := Path("no-such-tool")
	if err == nil || !strings.Contains(err.Error(), "unknown tool no-such-tool") {
		t.Fatalf("Path(no-such-tool) = %v, want hack/tool.sh's refusal", err)
	}
	if _, again := Path("no-such-tool"); again == nil || again.Error() != err.Error() {
		t.Errorf("second call: %v, want the kept error", again)
	}
}
