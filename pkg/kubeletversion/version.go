package kubeletversion

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"time"

	utilversion "k8s.io/apimachinery/pkg/util/version"
)

// Version is a Kubernetes release version, as `kubelet --version` and a
// Node's status.nodeInfo.kubeletVersion print it: v1.37.2, v1.38.0-alpha.0,
// v1.36.3+k3s1.
type Version struct {
	Major, Minor, Patch int
	// Pre is the pre-release ("alpha.0", "rc.1"), "" for a release.
	Pre string
	// Build is the build metadata after "+" (distributions: "k3s1").
	Build string
}

// ErrParse is wrapped by Parse's errors.
var ErrParse = errors.New("not a Kubernetes version")

// Parse reads a version such as "v1.37.2" with Kubernetes' own parser,
// k8s.io/apimachinery's version.ParseSemantic (semantic versioning; the
// leading "v" is optional).
func Parse(s string) (Version, error) {
	sv, err := utilversion.ParseSemantic(s)
	if err != nil {
		return Version{}, fmt.Errorf("kubeletversion: %q: %w (want vMAJOR.MINOR.PATCH, e.g. v1.37.2): %v", s, ErrParse, err)
	}
	const maxPart = 1 << 30
	if sv.Major() > maxPart || sv.Minor() > maxPart || sv.Patch() > maxPart {
		return Version{}, fmt.Errorf("kubeletversion: %q: %w (a part is out of range)", s, ErrParse)
	}
	return Version{
		Major: int(sv.Major()), Minor: int(sv.Minor()), Patch: int(sv.Patch()),
		Pre: sv.PreRelease(), Build: sv.BuildMetadata(),
	}, nil
}

// MustParse is Parse for constants; it panics on a malformed version.
func MustParse(s string) Version {
	v, err := Parse(s)
	if err != nil {
		panic(err)
	}
	return v
}

// String prints v as Kubernetes does: v1.37.2, v1.38.0-alpha.0.
func (v Version) String() string {
	s := fmt.Sprintf("v%d.%d.%d", v.Major, v.Minor, v.Patch)
	if v.Pre != "" {
		s += "-" + v.Pre
	}
	if v.Build != "" {
		s += "+" + v.Build
	}
	return s
}

// IsZero reports whether v is the zero Version (not known).
func (v Version) IsZero() bool { return v == Version{} }

// kubeletVersionRE finds the version in `kubelet --version` output
// ("Kubernetes v1.36.3").
var kubeletVersionRE = regexp.MustCompile(`Kubernetes (v\S+)`)

// ParseVersionOutput reads the output of `kubelet --version`.
func ParseVersionOutput(out []byte) (Version, error) {
	m := kubeletVersionRE.FindSubmatch(bytes.TrimSpace(out))
	if m == nil {
		return Version{}, fmt.Errorf("kubeletversion: %q is not `kubelet --version` output (want \"Kubernetes vX.Y.Z\"): %w", firstLine(out), ErrParse)
	}
	return Parse(string(m[1]))
}

// versionTimeout bounds `kubelet --version`; it prints and exits in
// milliseconds.
const versionTimeout = 10 * time.Second

// FromBinary runs `path --version` and returns the version it prints. The
// kubelet prints "Kubernetes v1.36.3" and exits 0 without reading its
// configuration or touching the host.
func FromBinary(ctx context.Context, path string) (Version, error) {
	ctx, cancel := context.WithTimeout(ctx, versionTimeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, path, "--version")
	cmd.Env = []string{}
	out, err := cmd.Output()
	if err != nil {
		return Version{}, fmt.Errorf("kubeletversion: %s --version: %w", path, err)
	}
	v, err := ParseVersionOutput(out)
	if err != nil {
		return Version{}, fmt.Errorf("kubeletversion: %s --version: %w", path, err)
	}
	return v, nil
}

func firstLine(b []byte) string {
	if i := bytes.IndexByte(b, '\n'); i >= 0 {
		b = b[:i]
	}
	if len(b) > 80 {
		b = b[:80]
	}
	return string(b)
}

// FromProcess returns the version of the running kubelet pid under procRoot
// (/proc, or /host/proc in a pod with hostPID) by running its executable,
// procRoot/<pid>/exe, with --version: the binary the process runs, whatever
// its path. A binary replaced on disk since the process started (an
// upgrade: the link reads "... (deleted)") is an error: a restart would start
// another kubelet, whose version this is not.
func FromProcess(ctx context.Context, procRoot string, pid int) (Version, error) {
	exe := filepath.Join(procRoot, strconv.Itoa(pid), "exe")
	target, err := os.Readlink(exe)
	if err != nil {
		return Version{}, fmt.Errorf("kubeletversion: %w", err)
	}
	if strings.HasSuffix(target, " (deleted)") {
		return Version{}, fmt.Errorf("kubeletversion: the kubelet's binary %s was replaced on disk after it started: a restart would start another version", strings.TrimSuffix(target, " (deleted)"))
	}
	return FromBinary(ctx, exe)
}
