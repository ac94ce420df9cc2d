package main

import (
	"encoding/json"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	args string
}

func parseDockerfile(src string) []instruction {
	var out []instruction
	var cur strings.Builder
	for _, line := range strings.Split(src, "\n") {
		t := strings.TrimSpace(line)
		if cur.Len() == 0 && (t == "" || strings.HasPrefix(t, "#")) {
			continue
		}
		if strings.HasSuffix(t, "\\") {
			cur.WriteString(strings.TrimSuffix(t, "\\") + " ")
			continue
		}
		cur.WriteString(t)
		cmd, args, _ := strings.Cut(cur.String(), " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.Join(strings.Fields(args), " ")})
		cur.Reset()
	}
	return out
}

// makeVar reads `NAME := value` (or ?=, =) from the Makefile.
func makeVar(t *testing.T, makefile, name string) string {
	t.Helper()
	m := regexp.MustCompile(`(?m)^` + name + `\s*[:?]?=\s*(.*?)\s*$`).FindStringSubmatch(makefile)
	if m == nil {
		t.Fatalf("Makefile has no %s", name)
	}
	return m[1]
}

// TestDockerfileMatchesMakefile: the Dockerfile's image has the file system
// and entrypoint `make image` gives (only the binary, at IMAGE_PATH, run as
// IMAGE_ENTRYPOINT), built with the same flags.
func TestDockerfileMatchesMakefile(t *testing.T) {
	makefile := string(readFile(t, filepath.Join("..", "..", "Makefile")))
	path := makeVar(t, makefile, "IMAGE_PATH")
	entrypoint := strings.Split(makeVar(t, makefile, "IMAGE_ENTRYPOINT"), ",")
	ldflags := strings.ReplaceAll(makeVar(t, makefile, "LDFLAGS"), "$(VERSION)", "${VERSION}")

	ins := parseDockerfile(string(readFile(t, filepath.Join("..", "..", "Dockerfile"))))
	last := -1
	for i, in := range ins {
		if in.cmd == "FROM" {
			last = i
		}
	}
	if last < 0 {
		t.Fatal("Dockerfile has no FROM")
	}
	build, final := ins[:last], ins[last:]

	if final[0].args != "scratch" {
		t.Errorf("final stage is FROM %s, want FROM scratch (nothing but the binary)", final[0].args)
	}
	var copies, entrypoints []instruction
	for _, in := range final[1:] {
		switch in.cmd {
		case "COPY":
			copies = append(copies, in)
		case "ENTRYPOINT":
			entrypoints = append(entrypoints, in)
		default:
			t.Errorf("final stage has %s %s: only one COPY and the ENTRYPOINT belong there (make image sets nothing else)", in.cmd, in.args)
		}
	}
	var src string
	if len(copies) != 1 {
		t.Errorf("final stage has %d COPY, want 1", len(copies))
	} else {
		f := strings.Fields(copies[0].args)
		var flags, paths []string
		for _, w := range f {
			if strings.HasPrefix(w, "--") {
				flags = append(flags, w)
			} else {
				paths = append(paths, w)
			}
		}
		if diff := cmp.Diff([]string{"--from=build", "--chmod=0755"}, flags); diff != "" {
			t.Errorf("final COPY flags (-want +got):\n%s", diff)
		}
		if len(paths) != 2 || paths[1] != path {
			t.Errorf("final COPY %q: want one file copied to %s (Makefile IMAGE_PATH)", copies[0].args, path)
		} else {
			src = paths[0]
		}
	}
	if len(entrypoints) != 1 {
		t.Fatalf("final stage has %d ENTRYPOINT, want 1", len(entrypoints))
	}
	var ep []string
	if err := json.Unmarshal([]byte(entrypoints[0].args), &ep); err != nil {
		t.Fatalf("ENTRYPOINT %s: want the exec (JSON) form: %v", entrypoints[0].args, err)
	}
	if diff := cmp.Diff(entrypoint, ep); diff != "" {
		t.Errorf("Dockerfile ENTRYPOINT vs Makefile IMAGE_ENTRYPOINT (-want +got):\n%s", diff)
	}

	// The builder: the binary the final stage copies, built like make image
	// builds it.
	var goBuild string
	for _, in := range build {
		if in.cmd == "RUN" && strings.Contains(in.args, "go build") {
			goBuild = in.args
		}
	}
	wants := []string{"CGO_ENABLED=0", "-trimpath", "-buildvcs=false", `-ldflags "` + ldflags + `"`}
	if src != "" {
		wants = append(wants, "-o "+src+" ./cmd/hotplugd")
	}
	for _, want := range wants {
		if !strings.Contains(goBuild, want) {
			t.Errorf("Dockerfile's go build %q lacks %q (as make image builds)", goBuild, want)
		}
	}
}
