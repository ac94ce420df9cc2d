package podnames

import (
	"io/fs"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestParse(t *testing.T) {
	for _, tc := range []struct {
		dir  string
		want Pod
		ok   bool
	}{
		{"default_pinned_1f2e3d4c-5b6a-4789-9abc-def012345678", Pod{"default", "pinned", "1f2e3d4c-5b6a-4789-9abc-def012345678"}, true},
		// A name is a DNS subdomain: dots and dashes, never "_".
		{"kube-system_etcd-node.a-1.example.com_0123456789abcdef0123456789abcdef", Pod{"kube-system", "etcd-node.a-1.example.com", "0123456789abcdef0123456789abcdef"}, true},
		{"a_b_c", Pod{"a", "b", "c"}, true},
		{"ns-1_web-0.v2_uid", Pod{"ns-1", "web-0.v2", "uid"}, true},
		// An "_" in the middle is no pod name: a namespace or a UID cannot
		// be told from it.
		{"default_my_pod_uid", Pod{}, false},
		// The old layout: the bare UID.
		{"1f2e3d4c-5b6a-4789-9abc-def012345678", Pod{}, false},
		{"default_uid", Pod{}, false},
		{"_name_uid", Pod{}, false},
		{"default__uid", Pod{}, false},
		{"default_name_", Pod{}, false},
		// A namespace is a DNS label: no dots, no capitals.
		{"my.ns_name_uid", Pod{}, false},
		{"Default_name_uid", Pod{}, false},
		{"default_Name_uid", Pod{}, false},
		{"", Pod{}, false},
	} {
		t.Run(tc.dir, func(t *testing.T) {
			got, ok := parse(tc.dir)
			if ok != tc.ok || got != tc.want {
				t.Errorf("parse(%q) = %+v, %v; want %+v, %v", tc.dir, got, ok, tc.want, tc.ok)
			}
		})
	}
}

func mkdirs(t *testing.T, root string, names ...string) {
	t.Helper()
	for _, n := range names {
		if err := os.MkdirAll(filepath.Join(root, n, "work"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
}

const (
	uidPinned = "1f2e3d4c-5b6a-4789-9abc-def012345678"
	uidDotted = "6f1c2b9e-4a57-4e0b-9a55-1d2c3b4a5f60"
	uidGone   = "a3d4e5f6-7b8c-4d9e-8f01-23456789abcd"
	uidStray  = "0badf00d-0000-4000-8000-000000000000"
	uidTwice  = "22222222-2222-4222-8222-222222222222"
)

func TestResolve(t *testing.T) {
	logs := t.TempDir()
	mkdirs(t, logs,
		"default_pinned_"+uidPinned,
		"kube-system_etcd-node-1.example.com_"+uidDotted,
		"other_unasked_33333333-3333-4333-8333-333333333333",
		// The old layout names no pod.
		uidGone,
		"a_twice_"+uidTwice, "b_twice_"+uidTwice,
	)
	// A stray file and a symlink with a pod's layout are not the
	// kubelet's directories.
	if err := os.WriteFile(filepath.Join(logs, "default_stray_"+uidStray), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Join(logs, "default_pinned_"+uidPinned), filepath.Join(logs, "default_link_"+uidGone)); err != nil {
		t.Fatal(err)
	}

	got := Resolve(logs, []string{uidPinned, uidDotted, uidGone, uidStray, uidTwice})
	want := map[string]Pod{
		uidPinned: {Namespace: "default", Name: "pinned", UID: uidPinned},
		uidDotted: {Namespace: "kube-system", Name: "etcd-node-1.example.com", UID: uidDotted},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unexpected pods (-want +got):\n%s", diff)
	}
	if s := got[uidDotted].String(); s != "kube-system/etcd-node-1.example.com" {
		t.Errorf("String() = %q", s)
	}
}

func TestResolveNothing(t *testing.T) {
	logs := t.TempDir()
	mkdirs(t, logs, "default_pinned_"+uidPinned)
	unreadable := filepath.Join(t.TempDir(), "pods")
	mkdirs(t, unreadable, "default_pinned_"+uidPinned)
	if err := os.Chmod(unreadable, 0o311); err != nil { // search but no read
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(unreadable, 0o755) })
	readable := os.Geteuid() == 0 // root reads it all the same

	for _, tc := range []struct {
		name string
		dir  string
		uids []string
		skip bool
	}{
		{"no directory configured", "", []string{uidPinned}, false},
		{"missing directory", filepath.Join(logs, "absent"), []string{uidPinned}, false},
		{"a file, not a directory", filepath.Join(logs, "default_pinned_"+uidPinned, "work", "x"), []string{uidPinned}, false},
		{"unknown UID", logs, []string{uidGone}, false},
		{"no UIDs", logs, nil, false},
		{"unreadable directory", unreadable, []string{uidPinned}, readable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.skip {
				t.Skip("root reads a directory without read permission")
			}
			if got := Resolve(tc.dir, tc.uids); len(got) != 0 {
				t.Errorf("Resolve(%q, %q) = %v, want no pods", tc.dir, tc.uids, got)
			}
		})
	}
}

func TestPodString(t *testing.T) {
	for _, tc := range []struct {
		pod  Pod
		want string
	}{
		{Pod{Namespace: "default", Name: "pinned", UID: uidPinned}, "default/pinned"},
		{Pod{UID: uidPinned}, "uid " + uidPinned},
	} {
		if got := tc.pod.String(); got != tc.want {
			t.Errorf("%+v.String() = %q, want %q", tc.pod, got, tc.want)
		}
	}
}

// TestResolveReadError: a listing that fails part way still names the
// pods read before the error (os.ReadDir returns them), and one that fails
// at once names none. Root reads a directory without read permission, so
// the failures are made here.
func TestResolveReadError(t *testing.T) {
	logs := t.TempDir()
	mkdirs(t, logs, "default_pinned_"+uidPinned, "kube-system_etcd-node-1.example.com_"+uidDotted)
	all, err := os.ReadDir(logs)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		entries []fs.DirEntry
		want    map[string]Pod
	}{
		{"permission denied", nil, map[string]Pod{}},
		{"error after the first entry", all[:1], map[string]Pod{uidPinned: {Namespace: "default", Name: "pinned", UID: uidPinned}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			readDir := func(string) ([]fs.DirEntry, error) { return tc.entries, fs.ErrPermission }
			got := resolve(readDir, logs, []string{uidPinned, uidDotted})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("unexpected pods (-want +got):\n%s", diff)
			}
		})
	}
}
