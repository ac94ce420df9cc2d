package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// raceExempt are packages whose code is concurrent but that make unit runs
// without the race detector, each for its reason.
var raceExempt = map[string]string{
	"internal/daemontest":      "test helper: reads a child process's output",
	"internal/kubeapitest":     "test helper: runs etcd and the API server as child processes",
	"internal/qemutest":        "test helper: runs QEMU",
	"internal/faultpoint":      "compiled in only with the faultinject tag, for the end-to-end tests",
	"internal/hacktool":        "test helper: runs hack/tool.sh once",
	"test/e2e/images/pause":    "a container image's program",
	"test/e2e/images/workload": "a container image's program",
	"test/e2e/node/probed":     "a container image's program",
	"test/e2e/vm/guestinit":    "the VM's init, run in the guest",
	"test/systemd":             "test helper: runs a standalone journald",
	"internal/machinetest":     "test helper",
	"internal/metricsref":      "test helper: reads collectors' descriptions over a channel",
	"test/e2e/node/agent":      "the node VM's agent, run in the guest",
}

// TestRacePackages checks the Makefile's RACE_PKGS, the packages make unit
// tests with the race detector, against the code: every package of the
// module whose non-test code is concurrent (a go statement, a channel, or
// package sync) is in it or exempt for a reason (raceExempt), and every
// package in it exists and is concurrent.
func TestRacePackages(t *testing.T) {
	b, err := os.ReadFile("../../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	var listed []string
	in := false
	for line := range strings.SplitSeq(string(b), "\n") {
		if strings.HasPrefix(line, "RACE_PKGS = ") {
			in, line = true, strings.TrimPrefix(line, "RACE_PKGS = ")
		}
		if !in {
			continue
		}
		for f := range strings.FieldsSeq(strings.TrimSuffix(line, "\\")) {
			listed = append(listed, strings.TrimPrefix(f, "./"))
		}
		if !strings.HasSuffix(line, "\\") {
			break
		}
	}
	if len(listed) < 5 {
		t.Fatalf("Makefile: RACE_PKGS has %d packages: %v", len(listed), listed)
	}
	starts := map[string]bool{}
	root := filepath.Join("..", "..")
	err = filepath.WalkDir(root, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, path)
		if d.IsDir() {
			// Other modules, build output, test data.
			if rel == "bin" || rel == "hack" || rel == "test/kubeletcompat" || d.Name() == "testdata" || strings.HasPrefix(d.Name(), ".") && rel != "." {
				return filepath.SkipDir
			}
			return nil
		}
		if !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		pkg := filepath.ToSlash(filepath.Dir(rel))
		for _, imp := range f.Imports {
			if p := strings.Trim(imp.Path.Value, `"`); p == "sync" || p == "sync/atomic" {
				starts[pkg] = true
			}
		}
		ast.Inspect(f, func(n ast.Node) bool {
			switch n.(type) {
			case *ast.GoStmt, *ast.ChanType, *ast.SelectStmt, *ast.SendStmt:
				starts[pkg] = true
				return false
			}
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(starts) < 5 {
		t.Fatalf("found go statements in %d packages: the walk is broken", len(starts))
	}
	for pkg := range starts {
		if !slices.Contains(listed, pkg) && raceExempt[pkg] == "" {
			t.Errorf("package %s is concurrent: add ./%s to the Makefile's RACE_PKGS, or to raceExempt with the reason", pkg, pkg)
		}
	}
	for _, pkg := range listed {
		if !starts[pkg] {
			t.Errorf("RACE_PKGS lists %s, which has no go statement, channel or package sync (or does not exist)", pkg)
		}
	}
}
