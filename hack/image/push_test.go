package main

import (
	"bytes"
	"context"
	"io"
	"log"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// testRegistry is go-containerregistry's in-memory registry on 127.0.0.1
// (which the client speaks plain HTTP to); it returns the host:port.
func testRegistry(t *testing.T) string {
	t.Helper()
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	t.Cleanup(srv.Close)
	host := strings.TrimPrefix(srv.URL, "http://")
	if !strings.HasPrefix(host, "127.0.0.1:") {
		t.Fatalf("test registry listens on %s, want 127.0.0.1", host)
	}
	return host
}

func TestPushPull(t *testing.T) {
	d, archive := buildOnce(t, "v1", nil)
	host := testRegistry(t)
	localIdx, _ := openLayout(t, archive)

	for _, tc := range []struct {
		name   string
		target string
		pull   string // reference to pull back
	}{
		{"tag", host + "/ops/hotplugd:v0.1.0", host + "/ops/hotplugd:v0.1.0"},
		{"digest only", host + "/other/hotplugd", host + "/other/hotplugd@" + d},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := runOK(t, "push", "--archive", archive, tc.target)
			repo, _, _ := strings.Cut(tc.pull, "@")
			repo = strings.TrimSuffix(repo, ":v0.1.0")
			if got, want := lastLine(t, out), repo+"@"+d; got != want {
				t.Errorf("push printed %q, want %q", got, want)
			}
			ref, err := name.ParseReference(tc.pull)
			if err != nil {
				t.Fatal(err)
			}
			idx, err := remote.Index(ref)
			if err != nil {
				t.Fatalf("pull %s: %v", ref, err)
			}
			got, err := idx.Digest()
			if err != nil {
				t.Fatal(err)
			}
			if got.String() != d {
				t.Errorf("pulled index digest %s, pushed %s", got, d)
			}
			// Every image and every blob under the index went too.
			im, err := localIdx.IndexManifest()
			if err != nil {
				t.Fatal(err)
			}
			for _, m := range im.Manifests {
				img, err := remote.Image(ref.Context().Digest(m.Digest.String()))
				if err != nil {
					t.Fatalf("pull %s image %s: %v", m.Platform, m.Digest, err)
				}
				layers, err := img.Layers()
				if err != nil {
					t.Fatal(err)
				}
				for _, l := range layers {
					rc, err := l.Compressed()
					if err != nil {
						t.Fatalf("pull %s layer: %v", m.Platform, err)
					}
					if _, err := io.Copy(io.Discard, rc); err != nil {
						t.Fatalf("pull %s layer: %v", m.Platform, err)
					}
					rc.Close()
				}
			}
		})
	}
}

func TestPushRefuses(t *testing.T) {
	_, archive := buildOnce(t, "v1", nil)
	host := testRegistry(t)
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no archive flag", []string{"push", host + "/x:v1"}, "no --archive"},
		{"no destination", []string{"push", "--archive", archive}, "no destination"},
		{"digest given", []string{"push", "--archive", archive, host + "/x@sha256:" + strings.Repeat("0", 64)}, "the digest is the archive's"},
		{"two destinations", []string{"push", "--archive", archive, host + "/x:v1", host + "/y:v1"}, "want one"},
		{"not an archive", []string{"push", "--archive", "push_test.go", host + "/x:v1"}, "not a tar archive"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), tc.args, &stdout, &stderr)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
			if stdout.Len() != 0 {
				t.Errorf("stdout %q, want nothing", stdout.String())
			}
		})
	}
}
