package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSBOM: the SBOM of this test's own binary (it has build information
// like any Go binary) is the same twice, lists the binary and the standard
// library, and has no time but the one given; the command writes it as
// indented JSON.
func TestSBOM(t *testing.T) {
	exe, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	bin := readFile(t, exe)
	epoch := time.Unix(testEpoch, 0).UTC()
	doc, err := sbom(bin, "release.test", "release", "v0.1.0", "https://example.com/spdx/", epoch)
	if err != nil {
		t.Fatal(err)
	}
	again, err := sbom(bin, "release.test", "release", "v0.1.0", "https://example.com/spdx/", epoch)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := json.Marshal(doc)
	b, _ := json.Marshal(again)
	if !bytes.Equal(a, b) {
		t.Error("two SBOMs of one binary differ")
	}
	if doc.CreationInfo.Created != "2026-01-01T00:00:00Z" {
		t.Errorf("created %s", doc.CreationInfo.Created)
	}
	if !strings.HasPrefix(doc.DocumentNamespace, "https://example.com/spdx/release.test-") {
		t.Errorf("namespace %s", doc.DocumentNamespace)
	}
	if len(doc.Packages) < 2 || doc.Packages[0].Name != "release" || doc.Packages[0].VersionInfo != "v0.1.0" || doc.Packages[1].Name != "stdlib" {
		t.Errorf("packages %+v", doc.Packages)
	}
	if len(doc.Relationships) != len(doc.Packages) {
		t.Errorf("%d relationships for %d packages", len(doc.Relationships), len(doc.Packages))
	}
	if _, err := sbom([]byte("not a binary"), "x", "", "v0.1.0", "https://example.com", epoch); err == nil {
		t.Error("an SBOM of a file that is not a Go binary")
	}

	out := filepath.Join(t.TempDir(), "release.test.spdx.json")
	runOK(t, "sbom", "--binary", exe, "--version", "v0.1.0", "--created", "1767225600",
		"--namespace", "https://example.com/spdx", "--out", out)
	doc, err = sbom(bin, filepath.Base(exe), "", "v0.1.0", "https://example.com/spdx", epoch)
	if err != nil {
		t.Fatal(err)
	}
	want, err := json.MarshalIndent(doc, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if got := readFile(t, out); !bytes.Equal(got, append(want, '\n')) {
		t.Errorf("image sbom wrote\n%s\nwant\n%s", got, want)
	}
}

func TestSBOMHelpers(t *testing.T) {
	// go.sum's hash of github.com/google/go-cmp v0.7.0, and its hex.
	h, err := h1SHA256("h1:wk8382ETsv4JYUZwIsn6YpYiWiBsYLSJiTsyBybVuN8=")
	if want := "c24f37f36113b2fe0961467022c9fa6296225a206c60b489893b320726d5b8df"; err != nil || h != want {
		t.Errorf("h1SHA256: %q, %v; want %s", h, err, want)
	}
	if _, err := h1SHA256("h2:abc"); err == nil {
		t.Error("h1SHA256 took an h2: hash")
	}
	for in, want := range map[string]string{
		"github.com/docker/cli@v29.7.2+incompatible": "pkg:golang/github.com/docker/cli@v29.7.2%2Bincompatible",
		"stdlib@go1.26.8": "pkg:golang/stdlib@go1.26.8",
	} {
		p, v, _ := strings.Cut(in, "@")
		if got := purlRef(p, v).Locator; got != want {
			t.Errorf("purl of %s: %s, want %s", in, got, want)
		}
	}
	if got := spdxIDPart("github.com/a_b/c@v1.0.0+incompatible"); got != "github.com-a-b-c-v1.0.0-incompatible" {
		t.Errorf("spdxIDPart: %s", got)
	}
}
