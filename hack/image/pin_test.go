package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

var (
	testDigest  = "sha256:" + strings.Repeat("ab", 32)
	testDigest2 = "sha256:" + strings.Repeat("cd", 32)
)

const hotplugdImage = "ghcr.io/hotplugd/hotplugd"

func TestPinImage(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{{
		name: "newTag becomes digest, comments kept",
		in: `# top comment
resources:
  - daemonset.yaml # trailing
images:
  # Pin a released tag or digest here (newTag / digest).
  - name: ghcr.io/hotplugd/hotplugd
    newTag: latest
# after
labels: {}
`,
		want: `# top comment
resources:
  - daemonset.yaml # trailing
images:
  # Pin a released tag or digest here (newTag / digest).
  - name: ghcr.io/hotplugd/hotplugd
    newName: registry.example.com/ops/hotplugd
    digest: ` + testDigest + `
# after
labels: {}
`,
	}, {
		name: "pinned again: newName and digest replaced in place",
		in: `images:
  - name: ghcr.io/hotplugd/hotplugd
    digest: ` + testDigest2 + ` # old
    newName: old.example.com/hotplugd
`,
		want: `images:
  - name: ghcr.io/hotplugd/hotplugd
    digest: ` + testDigest + ` # old
    newName: registry.example.com/ops/hotplugd
`,
	}, {
		name: "newTag and digest: newTag dropped",
		in: `images:
  - name: "ghcr.io/hotplugd/hotplugd"
    newTag: v1
    digest: ` + testDigest2 + `
`,
		want: `images:
  - name: "ghcr.io/hotplugd/hotplugd"
    newName: registry.example.com/ops/hotplugd
    digest: ` + testDigest + `
`,
	}, {
		name: "other entries untouched, compact list, CRLF, no final newline",
		in:   "images:\r\n- name: registry.k8s.io/pause\r\n  newTag: \"3.10\"\r\n- name: ghcr.io/hotplugd/hotplugd # ours\r\n  # a comment inside\r\n  newTag: latest # moving\r\n- name: other\r\n  newTag: x",
		want: "images:\r\n- name: registry.k8s.io/pause\r\n  newTag: \"3.10\"\r\n- name: ghcr.io/hotplugd/hotplugd # ours\r\n  newName: registry.example.com/ops/hotplugd\r\n  # a comment inside\r\n  digest: " + testDigest + " # moving\r\n- name: other\r\n  newTag: x",
	}, {
		name: "last line without newline",
		in:   "images:\n  - name: ghcr.io/hotplugd/hotplugd",
		want: "images:\n  - name: ghcr.io/hotplugd/hotplugd\n    newName: registry.example.com/ops/hotplugd\n    digest: " + testDigest,
	}, {
		name: "name not the first key",
		in:   "images:\n  - newTag: latest\n    name: ghcr.io/hotplugd/hotplugd\n",
		want: "images:\n  - digest: " + testDigest + "\n    name: ghcr.io/hotplugd/hotplugd\n    newName: registry.example.com/ops/hotplugd\n",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := pinImage([]byte(tc.in), hotplugdImage, "registry.example.com/ops/hotplugd", testDigest)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, string(got)); diff != "" {
				t.Errorf("pinned file (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPinImageRefuses(t *testing.T) {
	for _, tc := range []struct {
		name string
		in   string
		want string
	}{
		{"no images", "resources:\n  - a.yaml\n", "no top-level images: list"},
		{"entry missing", "images:\n  - name: registry.k8s.io/pause\n    newTag: \"3.10\"\n", "has no entry with name: ghcr.io/hotplugd/hotplugd"},
		{"nested images only", "patches:\n  images:\n    - name: ghcr.io/hotplugd/hotplugd\n", "no top-level images: list"},
		{"entry twice", "images:\n  - name: ghcr.io/hotplugd/hotplugd\n  - name: ghcr.io/hotplugd/hotplugd\n", "2 entries"},
		{"images twice", "images:\n  - name: a\nimages:\n  - name: b\n", "appears twice"},
		{"flow list", "images: [{name: ghcr.io/hotplugd/hotplugd}]\n", "written inline"},
		{"flow entry", "images:\n  - {name: ghcr.io/hotplugd/hotplugd, newTag: x}\n", "flow-style"},
		{"empty list", "images:\nresources: []\n", "has no entry"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pinImage([]byte(tc.in), hotplugdImage, "registry.example.com/ops/hotplugd", testDigest)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// TestPinRepoKustomization pins a copy of the committed kustomization:
// exactly the newTag line changes.
func TestPinRepoKustomization(t *testing.T) {
	src := readFile(t, filepath.Join("..", "..", "deploy", "kubernetes", "kustomization.yaml"))
	got, err := pinImage(src, hotplugdImage, "registry.example.com/ops/hotplugd", testDigest)
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, l := range strings.SplitAfter(string(src), "\n") {
		if strings.HasPrefix(strings.TrimSpace(l), "newTag:") || strings.HasPrefix(strings.TrimSpace(l), "digest:") ||
			strings.HasPrefix(strings.TrimSpace(l), "newName:") {
			continue
		}
		want = append(want, l)
		if strings.TrimSpace(l) == "- name: "+hotplugdImage {
			want = append(want, "    newName: registry.example.com/ops/hotplugd\n", "    digest: "+testDigest+"\n")
		}
	}
	if diff := cmp.Diff(strings.Join(want, ""), string(got)); diff != "" {
		t.Errorf("pinned kustomization (-want +got):\n%s", diff)
	}
}

func TestPinCommand(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "kustomization.yaml")
	in := "images:\n  # keep me\n  - name: ghcr.io/hotplugd/hotplugd\n    newTag: latest\n"
	if err := os.WriteFile(file, []byte(in), 0o640); err != nil {
		t.Fatal(err)
	}
	pin := func(args ...string) (string, error) {
		var stdout, stderr bytes.Buffer
		err := run(context.Background(), append([]string{"pin", "--kustomization", file}, args...), &stdout, &stderr)
		return stdout.String(), err
	}

	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"malformed digest", []string{"--name", hotplugdImage, "--new-name", "r.example.com/h", "--digest", "sha256:abc"}, "is not a digest"},
		{"uppercase digest", []string{"--name", hotplugdImage, "--new-name", "r.example.com/h", "--digest", strings.ToUpper(testDigest)}, "is not a digest"},
		{"new name with tag", []string{"--name", hotplugdImage, "--new-name", "r.example.com/h:v1", "--digest", testDigest}, "without tag or digest"},
		{"missing entry", []string{"--name", "ghcr.io/other/thing", "--new-name", "r.example.com/h", "--digest", testDigest}, "has no entry with name: ghcr.io/other/thing"},
		{"no name", []string{"--new-name", "r.example.com/h", "--digest", testDigest}, "no --name"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := pin(tc.args...)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if got := string(readFile(t, file)); got != in {
				t.Errorf("a refused pin changed the file:\n%s", got)
			}
		})
	}

	out, err := pin("--name", hotplugdImage, "--new-name", "registry.example.com/ops/hotplugd", "--digest", testDigest)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out, "registry.example.com/ops/hotplugd@"+testDigest) {
		t.Errorf("pin printed %q", out)
	}
	want := "images:\n  # keep me\n  - name: ghcr.io/hotplugd/hotplugd\n    newName: registry.example.com/ops/hotplugd\n    digest: " + testDigest + "\n"
	if diff := cmp.Diff(want, string(readFile(t, file))); diff != "" {
		t.Errorf("pinned file (-want +got):\n%s", diff)
	}
	st, err := os.Stat(file)
	if err != nil {
		t.Fatal(err)
	}
	if st.Mode().Perm() != 0o640 {
		t.Errorf("mode %o after the pin, want the file's 0640", st.Mode().Perm())
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Errorf("files left beside the kustomization: %v", entries)
	}
}
