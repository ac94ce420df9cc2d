package release

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/buildinfo"
	"debug/elf"
	"encoding/base64"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"maps"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"sigs.k8s.io/yaml"

	"github.com/hotplugd/hotplugd/internal/deploytest"
	"github.com/hotplugd/hotplugd/internal/hacktool"
)

const (
	repoRoot = "../.."
	// The version the test releases: a release candidate, so the -rc.N
	// form is the one exercised, and unlikely to be a real tag.
	testVersion = "v0.1.0-rc.1"
	// The repository the Makefile names the image by (IMAGE).
	imageRepo = "ghcr.io/hotplugd/hotplugd"
)

// need skips the test, saying why, when a command is missing.
func need(t *testing.T, cmds ...string) {
	t.Helper()
	for _, c := range cmds {
		if _, err := exec.LookPath(c); err != nil {
			t.Skipf("SKIPPED: %s not found (a release needs it): %v", c, err)
		}
	}
}

// tool is a tool hack/tool.sh builds; the test skips, saying why, when it
// cannot be built.
func tool(t *testing.T, name string) string {
	t.Helper()
	p, err := hacktool.Path(name)
	if err != nil {
		t.Skipf("SKIPPED: %s cannot be built here (set $%s to a %s binary to run this test):\n%v", name, hacktool.EnvVar(name), name, err)
	}
	return p
}

// cleanEnv is this process's environment without what would change a
// release behind the test's back: the release's own variables, the
// Makefile's that the environment overrides, and an outer make's flags
// (a go test run by make would pass its command-line variables on).
func cleanEnv(extra ...string) []string {
	drop := map[string]bool{
		"VERSION": true, "DIST": true, "RELEASE_UNTAGGED": true, "SOURCE_DATE_EPOCH": true,
		"IMAGE": true, "IMAGE_SOURCE": true, "KUSTOMIZE_IMAGE": true, "IMAGE_TOOL": true,
		"MAKEFLAGS": true, "MFLAGS": true, "MAKELEVEL": true, "GOOS": true, "GOARCH": true,
		"HOTPLUGD_KUSTOMIZE": true, "GO": true, "MAKE": true, "TMPDIR": true,
	}
	var env []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		if !drop[k] {
			env = append(env, kv)
		}
	}
	return append(env, extra...)
}

// git runs git in dir with env added to its environment and returns its
// standard output, trimmed.
func git(t *testing.T, dir string, env []string, args ...string) string {
	t.Helper()
	cmd := exec.Command("git", args...)
	cmd.Dir = dir
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("git %s (in %s): %v\n%s", strings.Join(args, " "), dir, err, stderr.String())
	}
	return strings.TrimSpace(stdout.String())
}

// snapshot is a clone of the repository at HEAD, in a temporary directory,
// with the work tree's uncommitted and untracked (not ignored) files copied
// in and committed on top: a clean tree with what the work tree holds now.
// The checkout itself is only read. The commit's author and committer dates
// are HEAD's committer date, so the snapshot's time, which a release
// stamps, does not depend on when the test runs. It returns the clone's
// directory and the environment that commits there.
func snapshot(t *testing.T) (string, []string) {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command("git", "-C", root, "rev-parse", "--verify", "HEAD").Output()
	if err != nil {
		t.Skipf("SKIPPED: %s is not a git checkout with a commit, and a release is made from one: %v", root, err)
	}
	head := strings.TrimSpace(string(out))
	when := "@" + git(t, root, nil, "log", "-1", "--format=%ct", "HEAD") + " +0000"
	commitEnv := []string{
		"GIT_AUTHOR_NAME=test/release", "GIT_AUTHOR_EMAIL=release@test.invalid", "GIT_AUTHOR_DATE=" + when,
		"GIT_COMMITTER_NAME=test/release", "GIT_COMMITTER_EMAIL=release@test.invalid", "GIT_COMMITTER_DATE=" + when,
	}

	dir := filepath.Join(t.TempDir(), "hotplugd")
	git(t, "", nil, "clone", "-q", "--no-checkout", root, dir)
	git(t, dir, nil, "checkout", "-q", "--detach", head)

	status := git(t, root, nil, "status", "--porcelain=v1", "-z", "--untracked-files=all")
	entries := strings.Split(status, "\x00")
	changed := 0
	for i := 0; i < len(entries); i++ {
		e := entries[i]
		if len(e) < 4 {
			continue
		}
		paths := []string{e[3:]}
		if e[0] == 'R' || e[0] == 'C' { // the original path follows
			i++
			if i < len(entries) {
				paths = append(paths, entries[i])
			}
		}
		for _, p := range paths {
			mirror(t, root, dir, p)
			changed++
		}
	}
	if changed > 0 {
		git(t, dir, nil, "add", "-A")
		git(t, dir, commitEnv, "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-m", "test/release: the work tree's changes")
	}
	if st := git(t, dir, nil, "status", "--porcelain"); st != "" {
		t.Fatalf("the snapshot is not clean:\n%s", st)
	}
	t.Logf("snapshot of %s (HEAD %.12s, %d changed or untracked files) in %s", root, head, changed, dir)
	return dir, commitEnv
}

// mirror makes rel in the clone dir what it is in the work tree root: the
// same file (mode, or link) or, deleted there, absent.
func mirror(t *testing.T, root, dir, rel string) {
	t.Helper()
	src, dst := filepath.Join(root, rel), filepath.Join(dir, rel)
	fi, err := os.Lstat(src)
	if err := os.RemoveAll(dst); err != nil {
		t.Fatal(err)
	}
	if errors.Is(err, fs.ErrNotExist) {
		return
	}
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		t.Fatal(err)
	}
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		target, err := os.Readlink(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink(target, dst); err != nil {
			t.Fatal(err)
		}
	case fi.Mode().IsRegular():
		b, err := os.ReadFile(src)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(dst, b, fi.Mode().Perm()); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(dst, fi.Mode().Perm()); err != nil { // past the umask
			t.Fatal(err)
		}
	default:
		t.Logf("snapshot: %s is neither a file nor a link: left out", rel)
	}
}

// prepareRelease does in the snapshot what a release manager does: moves
// CHANGELOG.md's Unreleased entries under the version, commits and tags.
// It returns the section's body and the date in its heading.
func prepareRelease(t *testing.T, dir string, commitEnv []string, version string) (string, string) {
	t.Helper()
	file := filepath.Join(dir, "CHANGELOG.md")
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	const unreleased = "## [Unreleased]\n"
	text := string(b)
	i := strings.Index(text, unreleased)
	if i < 0 {
		t.Fatalf("CHANGELOG.md has no %q heading (Keep a Changelog's)", strings.TrimSpace(unreleased))
	}
	rest := text[i+len(unreleased):]
	body := rest
	if j := strings.Index(rest, "\n## "); j >= 0 {
		body = rest[:j+1]
	}
	if strings.TrimSpace(body) == "" {
		t.Fatal("CHANGELOG.md's Unreleased section is empty: nothing to release")
	}
	sec, _ := strconv.ParseInt(git(t, dir, nil, "log", "-1", "--format=%ct", "HEAD"), 10, 64)
	date := time.Unix(sec, 0).UTC().Format("2006-01-02")
	text = text[:i] + unreleased + "\n## [" + strings.TrimPrefix(version, "v") + "] - " + date + "\n" + rest
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	git(t, dir, commitEnv, "-c", "commit.gpgsign=false", "commit", "-q", "--no-verify", "-a", "-m", "CHANGELOG.md: "+version)
	git(t, dir, nil, "tag", "-f", version)
	return body, date
}

// bounded is a command that is killed, with every process it started, a
// minute before the test's deadline (go test -timeout, 10 minutes by
// default); skipIfLate then skips the test, saying why, where go test would
// otherwise panic and end every test of the package. A cold build cache is
// why: the first release compiles every package of hotplugd for linux/amd64
// and linux/arm64 (about 10 minutes on 2 busy cores), and what it compiled
// stays in the cache for the next run. The callers give the command a
// TMPDIR of the test's, so nothing a killed command leaves outlives it.
func bounded(t *testing.T, name string, args ...string) (*exec.Cmd, func(error)) {
	t.Helper()
	deadline, ok := t.Deadline()
	if !ok { // -timeout 0
		deadline = time.Now().Add(24 * time.Hour)
	}
	left := time.Until(deadline)
	ctx, cancel := context.WithDeadline(context.Background(), deadline.Add(-time.Minute))
	t.Cleanup(cancel)
	cmd := exec.CommandContext(ctx, name, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	skipIfLate := func(err error) {
		t.Helper()
		if err != nil && ctx.Err() == context.DeadlineExceeded {
			t.Skipf("SKIPPED: %s %s did not finish within go test's -timeout (%s were left): the build cache is cold "+
				"(a first release compiles hotplugd for linux/amd64 and linux/arm64); what it compiled is kept, so a "+
				"later run goes further; run make release once, or go test -timeout 30m", name, strings.Join(args, " "), left.Round(time.Second))
		}
	}
	return cmd, skipIfLate
}

// makeRelease runs make release in dir into dist with the make variables
// vars and returns the last line it printed (the image reference).
func makeRelease(t *testing.T, dir, dist, kustomize string, vars ...string) string {
	t.Helper()
	args := append([]string{"-C", dir, "--no-print-directory", "release", "DIST=" + dist}, vars...)
	cmd, skipIfLate := bounded(t, "make", args...)
	cmd.Env = cleanEnv("HOTPLUGD_KUSTOMIZE="+kustomize, "TMPDIR="+t.TempDir())
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	if err := cmd.Run(); err != nil {
		skipIfLate(err)
		t.Fatalf("make %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
	}
	how := "(the version from the tag)"
	if len(vars) > 0 {
		how = strings.Join(vars, " ")
	}
	t.Logf("make release %s: %.1f s", how, time.Since(start).Seconds())
	return lastLine(stdout.String())
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.TrimSpace(lines[len(lines)-1])
}

func sha256Hex(b []byte) string {
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestReleaseReproducible: two releases of one commit, one taking the
// version from the tag and one given it, write the same SHA256SUMS, and the
// files are what docs/release.md says they are.
func TestReleaseReproducible(t *testing.T) {
	if testing.Short() {
		t.Skip("SKIPPED: -short: a release builds hotplugd for two architectures, twice")
	}
	need(t, "git", "make", "sha256sum", "realpath")
	kustomize := tool(t, "kustomize")
	helm := tool(t, "helm")
	start := time.Now()
	dir, commitEnv := snapshot(t)
	notes, date := prepareRelease(t, dir, commitEnv, testVersion)
	sec, _ := strconv.ParseInt(git(t, dir, nil, "log", "-1", "--format=%ct", "HEAD"), 10, 64)
	epoch := time.Unix(sec, 0).UTC()

	out := t.TempDir()
	dist1, dist2 := filepath.Join(out, "dist1"), filepath.Join(out, "dist2")
	ref1 := makeRelease(t, dir, dist1, kustomize)                         // the version from the tag
	ref2 := makeRelease(t, dir, dist2, kustomize, "VERSION="+testVersion) // given
	if ref1 != ref2 {
		t.Errorf("the releases name different images:\n  %s\n  %s", ref1, ref2)
	}
	sums1, err := os.ReadFile(filepath.Join(dist1, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	sums2, err := os.ReadFile(filepath.Join(dist2, "SHA256SUMS"))
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(sums1, sums2) {
		t.Fatalf("two releases of one commit differ (not reproducible):\n--- %s\n%s--- %s\n%s", dist1, sums1, dist2, sums2)
	}
	t.Logf("SHA256SUMS of both releases:\n%s", sums1)

	sums := checkSums(t, dist1, sums1)
	checkSums(t, dist2, sums2)
	v, cv := testVersion, strings.TrimPrefix(testVersion, "v")
	want := []string{
		"CHANGELOG.md",
		"hotplugd-" + cv + ".tgz",
		"hotplugd-" + v + "-linux-amd64",
		"hotplugd-" + v + "-linux-amd64.spdx.json",
		"hotplugd-" + v + "-linux-arm64",
		"hotplugd-" + v + "-linux-arm64.spdx.json",
		"hotplugd-" + v + "-monitoring.yaml",
		"hotplugd-" + v + "-restart-kubelet.yaml",
		"hotplugd-" + v + ".oci.tar",
		"hotplugd-" + v + ".yaml",
	}
	if got := slices.Sorted(maps.Keys(sums)); !slices.Equal(got, want) {
		t.Fatalf("dist holds %q, want %q", got, want)
	}

	digest := checkArchive(t, dist1, v, sums)
	if ref1 != imageRepo+":"+v+"@"+digest {
		t.Errorf("make release printed %q, want %s:%s@%s", ref1, imageRepo, v, digest)
	}
	for arch, machine := range map[string]elf.Machine{"amd64": elf.EM_X86_64, "arm64": elf.EM_AARCH64} {
		bin := filepath.Join(dist1, "hotplugd-"+v+"-linux-"+arch)
		checkBinary(t, bin, arch, machine, v)
		checkSBOM(t, bin, bin+".spdx.json", v, epoch)
	}
	checkManifests(t, dist1, v, imageRepo+"@"+digest)
	checkChart(t, helm, filepath.Join(dist1, "hotplugd-"+cv+".tgz"), v, imageRepo+"@"+digest, epoch)
	checkNotes(t, filepath.Join(dist1, "CHANGELOG.md"), v, "## ["+cv+"] - "+date, notes, digest)

	// The archive's digest is make image's for the version.
	imgStart := time.Now()
	cmd, skipIfLate := bounded(t, "make", "-C", dir, "-s", "--no-print-directory", "image", "VERSION="+v, "IMAGE_DIR="+filepath.Join(out, "image"))
	cmd.Env = cleanEnv("TMPDIR=" + t.TempDir())
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	b, err := cmd.Output()
	if err != nil {
		skipIfLate(err)
		t.Fatalf("make image VERSION=%s: %v\n%s", v, err, stderr.String())
	}
	if got := lastLine(string(b)); got != digest {
		t.Errorf("make image VERSION=%s printed %s, the release's archive has %s", v, got, digest)
	}
	t.Logf("make image VERSION=%s: %.1f s, digest %s", v, time.Since(imgStart).Seconds(), digest)
	t.Logf("TestReleaseReproducible: %.1f s in all", time.Since(start).Seconds())
}

var sumLine = regexp.MustCompile(`^([0-9a-f]{64})  (\S+)$`)

// checkSums parses SHA256SUMS (sha256sum's format, sorted by name, every
// file of dist but itself) and checks every file against it, as sha256sum
// -c does; it returns name -> hex.
func checkSums(t *testing.T, dist string, b []byte) map[string]string {
	t.Helper()
	sums := map[string]string{}
	var names []string
	for _, line := range strings.Split(strings.TrimSuffix(string(b), "\n"), "\n") {
		m := sumLine.FindStringSubmatch(line)
		if m == nil {
			t.Fatalf("%s/SHA256SUMS: line %q is not sha256sum's", dist, line)
		}
		sums[m[2]] = m[1]
		names = append(names, m[2])
	}
	if !slices.IsSorted(names) {
		t.Errorf("%s/SHA256SUMS is not sorted by name: %q", dist, names)
	}
	entries, err := os.ReadDir(dist)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		if e.Name() == "SHA256SUMS" {
			continue
		}
		if !e.Type().IsRegular() {
			t.Errorf("%s/%s is not a regular file", dist, e.Name())
			continue
		}
		b, err := os.ReadFile(filepath.Join(dist, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if got, ok := sums[e.Name()]; !ok {
			t.Errorf("%s/%s is not in SHA256SUMS", dist, e.Name())
		} else if got != sha256Hex(b) {
			t.Errorf("%s/%s: SHA256SUMS says %s, the file's is %s", dist, e.Name(), got, sha256Hex(b))
		}
	}
	if len(entries) != len(sums)+1 {
		t.Errorf("%s holds %d files, SHA256SUMS lists %d (and itself)", dist, len(entries), len(sums))
	}
	return sums
}

// ociDescriptor and ociIndex are the parts of the OCI image spec read here.
type ociDescriptor struct {
	MediaType   string            `json:"mediaType"`
	Digest      string            `json:"digest"`
	Annotations map[string]string `json:"annotations"`
	Platform    *struct {
		OS           string `json:"os"`
		Architecture string `json:"architecture"`
	} `json:"platform"`
}

type ociIndex struct {
	Manifests []ociDescriptor `json:"manifests"`
	Layers    []ociDescriptor `json:"layers"`
}

// tarEntry is an entry of a tar stream with its content (none but a
// file's).
type tarEntry struct {
	*tar.Header
	data []byte
}

// readTar reads every entry of a tar stream.
func readTar(t *testing.T, r io.Reader) []tarEntry {
	t.Helper()
	var entries []tarEntry
	tr := tar.NewReader(r)
	h, err := tr.Next()
	for ; err == nil; h, err = tr.Next() {
		b, rerr := io.ReadAll(tr)
		if rerr != nil {
			t.Fatal(rerr)
		}
		entries = append(entries, tarEntry{h, b})
	}
	if !errors.Is(err, io.EOF) {
		t.Fatal(err)
	}
	return entries
}

// tarFiles is the regular files of a tar stream by name.
func tarFiles(t *testing.T, r io.Reader) map[string][]byte {
	t.Helper()
	files := map[string][]byte{}
	for _, e := range readTar(t, r) {
		if e.Typeflag == tar.TypeReg {
			files[strings.TrimPrefix(e.Name, "./")] = e.data
		}
	}
	return files
}

// checkArchive reads the OCI archive: one image index named IMAGE:<v>, an
// image for linux/amd64 and one for linux/arm64 whose only file is the
// release's binary for that architecture. It returns the index digest.
func checkArchive(t *testing.T, dist, v string, sums map[string]string) string {
	t.Helper()
	f, err := os.Open(filepath.Join(dist, "hotplugd-"+v+".oci.tar"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	files := tarFiles(t, f)
	blob := func(digest string) []byte {
		t.Helper()
		hexd, ok := strings.CutPrefix(digest, "sha256:")
		b, found := files["blobs/sha256/"+hexd]
		if !ok || !found {
			t.Fatalf("the OCI archive has no blob %s", digest)
		}
		if sha256Hex(b) != hexd {
			t.Fatalf("the OCI archive's blob %s has another digest", digest)
		}
		return b
	}
	var top ociIndex
	if err := json.Unmarshal(files["index.json"], &top); err != nil {
		t.Fatalf("the OCI archive's index.json: %v", err)
	}
	if len(top.Manifests) != 1 {
		t.Fatalf("the OCI archive's index.json names %d manifests, want the one image index", len(top.Manifests))
	}
	d := top.Manifests[0]
	if want := imageRepo + ":" + v; d.Annotations["org.opencontainers.image.ref.name"] != want {
		t.Errorf("the OCI archive names its index %q, want %q", d.Annotations["org.opencontainers.image.ref.name"], want)
	}
	var idx ociIndex
	if err := json.Unmarshal(blob(d.Digest), &idx); err != nil {
		t.Fatal(err)
	}
	arches := map[string]bool{}
	for _, m := range idx.Manifests {
		if m.Platform == nil || m.Platform.OS != "linux" {
			t.Errorf("image %s: platform %+v, want linux", m.Digest, m.Platform)
			continue
		}
		arch := m.Platform.Architecture
		arches[arch] = true
		var img ociIndex
		if err := json.Unmarshal(blob(m.Digest), &img); err != nil {
			t.Fatal(err)
		}
		if len(img.Layers) != 1 {
			t.Errorf("the %s image has %d layers, want 1", arch, len(img.Layers))
			continue
		}
		zr, err := gzip.NewReader(bytes.NewReader(blob(img.Layers[0].Digest)))
		if err != nil {
			t.Fatal(err)
		}
		layer := tarFiles(t, zr)
		if got, want := sha256Hex(layer["hotplugd"]), sums["hotplugd-"+v+"-linux-"+arch]; got != want {
			t.Errorf("the %s image's /hotplugd (sha256 %s) is not the release's binary (%s)", arch, got, want)
		}
	}
	if !arches["amd64"] || !arches["arm64"] || len(arches) != 2 {
		t.Errorf("the image index has the architectures %v, want amd64 and arm64", arches)
	}
	return d.Digest
}

// checkBinary: a static ELF executable for machine, built by the release's
// flags from hotplugd's module, that says version.
func checkBinary(t *testing.T, bin, arch string, machine elf.Machine, version string) {
	t.Helper()
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	defer f.Close()
	if f.Machine != machine || f.Type != elf.ET_EXEC {
		t.Errorf("%s: %s %s, want %s %s", filepath.Base(bin), f.Type, f.Machine, elf.ET_EXEC, machine)
	}
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Errorf("%s: has a program interpreter: not static", filepath.Base(bin))
		}
	}
	if libs, err := f.ImportedLibraries(); err != nil || len(libs) > 0 {
		t.Errorf("%s: needs shared libraries %q (%v)", filepath.Base(bin), libs, err)
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatalf("%s: %v", bin, err)
	}
	settings := map[string]string{}
	for _, s := range bi.Settings {
		settings[s.Key] = s.Value
	}
	for k, want := range map[string]string{"GOOS": "linux", "GOARCH": arch, "CGO_ENABLED": "0", "-trimpath": "true"} {
		if settings[k] != want {
			t.Errorf("%s: built with %s=%q, want %q", filepath.Base(bin), k, settings[k], want)
		}
	}
	if _, ok := settings["vcs.revision"]; ok {
		t.Errorf("%s: records the checkout's vcs state (built without -buildvcs=false)", filepath.Base(bin))
	}
	if bi.Main.Path != "github.com/hotplugd/hotplugd" || bi.Path != "github.com/hotplugd/hotplugd/cmd/hotplugd" {
		t.Errorf("%s: the program %s of module %s", filepath.Base(bin), bi.Path, bi.Main.Path)
	}
	if runtime.GOOS == "linux" && runtime.GOARCH == arch {
		out, err := exec.Command(bin, "version").Output()
		if err != nil || strings.TrimSpace(string(out)) != "hotplugd "+version {
			t.Errorf("%s version: %q (%v), want \"hotplugd %s\"", filepath.Base(bin), out, err, version)
		}
	}
}

// checkSBOM: the SPDX document of bin lists it (its SHA-256, the version),
// the standard library and every module its build information names, with
// its version and go.sum hash; its time is the commit's.
func checkSBOM(t *testing.T, bin, file, version string, epoch time.Time) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		SPDXVersion       string `json:"spdxVersion"`
		DataLicense       string `json:"dataLicense"`
		SPDXID            string `json:"SPDXID"`
		DocumentNamespace string `json:"documentNamespace"`
		CreationInfo      struct {
			Created string `json:"created"`
		} `json:"creationInfo"`
		Packages []struct {
			Name        string `json:"name"`
			SPDXID      string `json:"SPDXID"`
			VersionInfo string `json:"versionInfo"`
			Checksums   []struct {
				Algorithm string `json:"algorithm"`
				Value     string `json:"checksumValue"`
			} `json:"checksums"`
		} `json:"packages"`
		Relationships []struct {
			Element string `json:"spdxElementId"`
			Type    string `json:"relationshipType"`
			Related string `json:"relatedSpdxElement"`
		} `json:"relationships"`
	}
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatalf("%s: %v", file, err)
	}
	name := filepath.Base(file)
	binBytes, err := os.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	binSum := sha256Hex(binBytes)
	if doc.SPDXVersion != "SPDX-2.3" || doc.DataLicense != "CC0-1.0" || doc.SPDXID != "SPDXRef-DOCUMENT" {
		t.Errorf("%s: %s, %s, %s: want SPDX-2.3, CC0-1.0, SPDXRef-DOCUMENT", name, doc.SPDXVersion, doc.DataLicense, doc.SPDXID)
	}
	if want := epoch.Format(time.RFC3339); doc.CreationInfo.Created != want {
		t.Errorf("%s: created %s, want the commit's time %s", name, doc.CreationInfo.Created, want)
	}
	if !strings.HasSuffix(doc.DocumentNamespace, "/"+filepath.Base(bin)+"-"+binSum) {
		t.Errorf("%s: documentNamespace %s does not end in the binary's name and SHA-256", name, doc.DocumentNamespace)
	}
	if len(doc.Packages) < 3 {
		t.Fatalf("%s: %d packages", name, len(doc.Packages))
	}
	main := doc.Packages[0]
	if main.Name != "hotplugd" || main.VersionInfo != version || len(main.Checksums) != 1 || main.Checksums[0].Value != binSum {
		t.Errorf("%s: the first package is %s %s %+v, want hotplugd %s with the binary's SHA-256 %s", name, main.Name, main.VersionInfo, main.Checksums, version, binSum)
	}
	described := false
	for _, r := range doc.Relationships {
		described = described || r.Element == "SPDXRef-DOCUMENT" && r.Type == "DESCRIBES" && r.Related == main.SPDXID
	}
	if !described {
		t.Errorf("%s: the document does not DESCRIBE %s", name, main.SPDXID)
	}
	type pkg struct{ version, sum string }
	listed := map[string]pkg{}
	for _, p := range doc.Packages[1:] {
		s := ""
		if len(p.Checksums) == 1 && p.Checksums[0].Algorithm == "SHA256" {
			s = p.Checksums[0].Value
		}
		listed[p.Name] = pkg{p.VersionInfo, s}
	}
	bi, err := buildinfo.ReadFile(bin)
	if err != nil {
		t.Fatal(err)
	}
	if got := listed["stdlib"].version; got != bi.GoVersion {
		t.Errorf("%s: stdlib %q, want %s", name, got, bi.GoVersion)
	}
	for _, d := range bi.Deps {
		if d.Replace != nil {
			d = d.Replace
		}
		raw, err := base64.StdEncoding.DecodeString(strings.TrimPrefix(d.Sum, "h1:"))
		if err != nil || !strings.HasPrefix(d.Sum, "h1:") {
			t.Errorf("%s: module %s has no h1: sum (%q)", filepath.Base(bin), d.Path, d.Sum)
			continue
		}
		if got, want := listed[d.Path], (pkg{d.Version, hex.EncodeToString(raw)}); got != want {
			t.Errorf("%s: module %s is %+v, want %+v (version, go.sum hash)", name, d.Path, got, want)
		}
	}
	if len(listed) != len(bi.Deps)+1 {
		t.Errorf("%s: %d packages besides the binary, want %d modules and stdlib", name, len(listed), len(bi.Deps))
	}
}

// checkManifests: each rendered manifest runs the release's image by
// digest, and is the variant its name says.
func checkManifests(t *testing.T, dist, v, image string) {
	t.Helper()
	for _, variant := range []string{"", "-restart-kubelet", "-monitoring"} {
		name := "hotplugd-" + v + variant + ".yaml"
		b, err := os.ReadFile(filepath.Join(dist, name))
		if err != nil {
			t.Fatal(err)
		}
		objs := deploytest.Decode(t, b)
		if got := deploytest.DaemonSetImage(objs); got != image {
			t.Errorf("%s: the DaemonSet runs %q, want %s", name, got, image)
		}
		if n := strings.Count(string(b), "image: "); n != 1 {
			t.Errorf("%s: %d image: fields, want the DaemonSet's one", name, n)
		}
		remedy, _ := deploytest.DaemonSetEnv(objs, "HOTPLUGD_REMEDY")
		if (remedy == "restart-kubelet") != (variant == "-restart-kubelet") {
			t.Errorf("%s: HOTPLUGD_REMEDY=%q", name, remedy)
		}
		kinds := map[string]bool{}
		for _, o := range objs {
			kinds[o.GetKind()] = true
		}
		if kinds["PodMonitor"] != (variant == "-monitoring") || kinds["PrometheusRule"] != (variant == "-monitoring") {
			t.Errorf("%s: kinds %v", name, kinds)
		}
		if !kinds["Namespace"] || !kinds["ValidatingAdmissionPolicy"] || !kinds["ClusterRole"] {
			t.Errorf("%s: kinds %v: not deploy/kubernetes", name, kinds)
		}
	}
}

// checkChart: the chart's .tgz is helm's layout with fixed headers, helm
// lint --strict passes it, helm template renders the release's image, and
// its version and appVersion are the release's.
func checkChart(t *testing.T, helm, tgz, v, image string, epoch time.Time) {
	t.Helper()
	f, err := os.Open(tgz)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	zr, err := gzip.NewReader(f)
	if err != nil {
		t.Fatal(err)
	}
	if !zr.ModTime.IsZero() || zr.Name != "" || zr.Comment != "" {
		t.Errorf("%s: gzip header with mtime %v, name %q, comment %q: want none", tgz, zr.ModTime, zr.Name, zr.Comment)
	}
	var names []string
	for _, h := range readTar(t, zr) {
		names = append(names, h.Name)
		if h.Typeflag != tar.TypeReg || h.Mode != 0o644 || h.Uid != 0 || h.Gid != 0 || h.Uname != "" || h.Gname != "" || !h.ModTime.Equal(epoch) {
			t.Errorf("%s: entry %s: type %c mode %o owner %d:%d (%q:%q) mtime %v, want a file 0644 0:0 without names at %v",
				filepath.Base(tgz), h.Name, h.Typeflag, h.Mode, h.Uid, h.Gid, h.Uname, h.Gname, h.ModTime, epoch)
		}
		if !strings.HasPrefix(h.Name, "hotplugd/") {
			t.Errorf("%s: entry %s is outside hotplugd/", filepath.Base(tgz), h.Name)
		}
	}
	if !slices.IsSorted(names) || !slices.Contains(names, "hotplugd/Chart.yaml") || !slices.Contains(names, "hotplugd/files/daemonset.yaml") {
		t.Errorf("%s: entries %q: want them sorted, with Chart.yaml and the files/ links resolved", filepath.Base(tgz), names)
	}

	run := func(args ...string) []byte {
		t.Helper()
		cmd := exec.Command(helm, args...)
		var stdout, stderr bytes.Buffer
		cmd.Stdout, cmd.Stderr = &stdout, &stderr
		if err := cmd.Run(); err != nil {
			t.Fatalf("helm %s: %v\n%s%s", strings.Join(args, " "), err, stdout.String(), stderr.String())
		}
		return stdout.Bytes()
	}
	run("lint", "--strict", tgz)
	for _, set := range [][]string{nil, {"--set", "remedy=restart-kubelet", "--set", "podMonitor.enabled=true", "--set", "prometheusRule.enabled=true"}} {
		objs := deploytest.Decode(t, run(append([]string{"template", "hotplugd", tgz, "--namespace", "hotplugd-system"}, set...)...))
		if got := deploytest.DaemonSetImage(objs); got != image {
			t.Errorf("helm template %v: the DaemonSet runs %q, want %s", set, got, image)
		}
	}
	var chart struct {
		Version    string `json:"version"`
		AppVersion string `json:"appVersion"`
	}
	if err := yaml.Unmarshal(run("show", "chart", tgz), &chart); err != nil {
		t.Fatal(err)
	}
	if chart.Version != strings.TrimPrefix(v, "v") || chart.AppVersion != v {
		t.Errorf("the chart's version %q and appVersion %q, want %s and %s", chart.Version, chart.AppVersion, strings.TrimPrefix(v, "v"), v)
	}
}

// checkNotes: dist's CHANGELOG.md is CHANGELOG.md's section of the version
// under a title, with the image digest.
func checkNotes(t *testing.T, file, v, heading, body, digest string) {
	t.Helper()
	b, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	notes := string(b)
	for _, want := range []string{"# hotplugd " + v + "\n", digest, heading + "\n" + body} {
		if !strings.Contains(notes, want) {
			t.Errorf("dist/CHANGELOG.md lacks %q:\n%s", want, notes)
		}
	}
	if !strings.HasPrefix(notes, "# hotplugd "+v+"\n") {
		t.Errorf("dist/CHANGELOG.md does not start with its title:\n%s", notes)
	}
	if strings.Contains(notes, "## [Unreleased]") {
		t.Errorf("dist/CHANGELOG.md holds the Unreleased section:\n%s", notes)
	}
}

// TestReleaseRefuses: hack/release.sh refuses, before it builds anything,
// a version that is not vX.Y.Z[-rc.N], one that is not HEAD's tag, a dirty
// tree, a DIST that is not a release directory and a version CHANGELOG.md
// has no section for; RELEASE_UNTAGGED=1 lets a trial release past the
// checks. GO, MAKE and the kustomize given are false: a run that got past
// the checks fails at once, and says so.
func TestReleaseRefuses(t *testing.T) {
	need(t, "git", "bash", "realpath")
	dir, _ := snapshot(t)
	// Whatever tags the checkout has, the clone starts without any.
	if tags := git(t, dir, nil, "tag", "--list"); tags != "" {
		git(t, dir, nil, append([]string{"tag", "-d"}, strings.Fields(tags)...)...)
	}
	script := filepath.Join(dir, "hack", "release.sh")
	falseBin, err := exec.LookPath("false")
	if err != nil {
		t.Skipf("SKIPPED: no false command: %v", err)
	}
	dist := filepath.Join(t.TempDir(), "dist")
	run := func(env ...string) (string, error) {
		cmd := exec.Command(script)
		cmd.Dir = dir
		cmd.Env = cleanEnv(append([]string{"DIST=" + dist, "TMPDIR=" + t.TempDir(), "GO=" + falseBin, "MAKE=" + falseBin, "HOTPLUGD_KUSTOMIZE=" + falseBin}, env...)...)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	refuses := func(want string, env ...string) string {
		t.Helper()
		out, err := run(env...)
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("release %v: %v, want a refusal saying %q:\n%s", env, err, want, out)
		}
		if strings.Contains(out, "building hack/image (sbom, chart)") {
			t.Errorf("release %v: got past the checks:\n%s", env, out)
		}
		return out
	}

	for _, v := range []string{"1.0.0", "v1.0", "v1.2.3-beta.1", "v01.2.3", "v1.2.3-rc.01", "v1.2.3+build"} {
		refuses("is not a release version", "VERSION="+v)
	}
	refuses("carries no vX.Y.Z tag")
	refuses("is not a tag on HEAD", "VERSION=v9.8.7")
	refuses("want 1 (a trial release)", "VERSION=v9.8.7", "RELEASE_UNTAGGED=yes")

	git(t, dir, nil, "tag", "v9.8.7")
	refuses("is tagged v9.8.7", "VERSION=v9.9.9")

	if err := os.MkdirAll(dist, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dist, "keep"), nil, 0o644); err != nil {
		t.Fatal(err)
	}
	refuses("is not a release directory")
	if err := os.RemoveAll(dist); err != nil {
		t.Fatal(err)
	}

	stray := filepath.Join(dir, "stray.txt")
	if err := os.WriteFile(stray, []byte("not committed\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The version from the tag names the release it refuses.
	refuses("A release of v9.8.7 is made from its commit alone")

	// A trial release gets past the checks (to the build, which GO=false
	// ends), with what it let pass said.
	out, err := run("VERSION=v9.9.9", "RELEASE_UNTAGGED=1")
	for _, want := range []string{"trial release (RELEASE_UNTAGGED=1): VERSION=v9.9.9, but HEAD", "of a dirty tree", "its Unreleased section is taken", "building hack/image (sbom, chart)"} {
		if err == nil || !strings.Contains(out, want) {
			t.Errorf("trial release: %v, want it past the checks saying %q:\n%s", err, want, out)
		}
	}

	if err := os.Remove(stray); err != nil {
		t.Fatal(err)
	}
	refuses(`CHANGELOG.md has no section "## [9.8.7]`)
	if _, err := os.Stat(dist); err == nil {
		t.Errorf("a refused release wrote %s", dist)
	}
}
