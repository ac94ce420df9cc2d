package allocated

import (
	"errors"
	"flag"
	"fmt"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"
	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/internal/checksum"
	"github.com/hotplugd/hotplugd/internal/kubeletstate"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/pkg/statefile"
)

var update = flag.Bool("update", false, "rewrite testdata/*.golden from the current output")

// file is a checkpoint holding data, with its checksum.
func file(data string) string {
	return fmt.Sprintf(`{"data":%q,"checksum":%d}`, data, checksum.Of(dump.ForHash(data)))
}

const oneEntry = `{"entries":{"u1":{"ContainerResources":{"c":{"requests":{"cpu":"600m"}}}}}}`

func TestParseErrors(t *testing.T) {
	good := file(oneEntry)
	for _, tc := range []struct {
		name  string
		minor int
		b     string
		want  error // nil: parses
	}{
		{"good", 34, good, nil},
		{"good, whitespace", 36, strings.Replace(good, `,"checksum"`, ",\n \"checksum\"", 1) + "\n", nil},
		{"no entries", 36, file(`{}`), nil},
		{"data null", 36, file(`null`), nil},
		{"entry null", 37, file(`{"entries":{"u1":null}}`), nil},
		{"capitalized key, as the kubelet's decoder", 36, strings.Replace(good, `"data"`, `"Data"`, 1), nil},
		{"empty", 36, ``, ErrCorrupt},
		{"not JSON", 36, `garbage`, ErrCorrupt},
		{"empty object: checksum 0 does not verify", 36, `{}`, ErrCorrupt},
		{"checksum off by one", 36, strings.Replace(good, `"checksum":`, `"checksum":1`, 1), ErrCorrupt},
		{"checksum negative", 36, `{"data":"{}","checksum":-1}`, ErrCorrupt},
		{"data edited", 36, strings.Replace(good, "600m", "700m", 1), ErrCorrupt},
		{"trailing garbage", 36, good + "x", ErrCorrupt},
		{"data not JSON", 36, file(`x`), ErrCorrupt},
		{"data empty", 36, file(``), ErrCorrupt},
		{"ContainerResources a number", 36, file(`{"entries":{"u1":{"ContainerResources":5}}}`), ErrCorrupt},
		{"quantity invalid", 36, file(`{"entries":{"u1":{"ContainerResources":{"c":{"requests":{"cpu":"lots"}}}}}}`), ErrCorrupt},
		{"PodLevelResources invalid, 1.36 reads it", 36, file(`{"entries":{"u1":{"PodLevelResources":7}}}`), ErrCorrupt},
		{"PodLevelResources invalid, 1.34 ignores it", 34, file(`{"entries":{"u1":{"PodLevelResources":7}}}`), ErrUnknownFormat},
		{"unknown envelope field", 36, strings.Replace(good, `{"data"`, `{"v":2,"data"`, 1), ErrUnknownFormat},
		{"checksum missing", 36, `{"data":"{}"}`, ErrCorrupt},
		{"unknown data field", 36, file(`{"entries":{},"v":2}`), ErrUnknownFormat},
		{"unknown entry field", 36, file(`{"entries":{"u1":{"Future":{}}}}`), ErrUnknownFormat},
		{"unknown requirements field", 36, file(`{"entries":{"u1":{"ContainerResources":{"c":{"future":1}}}}}`), ErrUnknownFormat},
		{"PodLevelResources in 1.34", 34, file(`{"entries":{"u1":{"PodLevelResources":null}}}`), ErrUnknownFormat},
		{"PodLevelResources in 1.35", 35, file(`{"entries":{"u1":{"PodLevelResources":null}}}`), nil},
		{"EmptyDirVolumeLimits in 1.36", 36, file(`{"entries":{"u1":{"EmptyDirVolumeLimits":null}}}`), ErrUnknownFormat},
		{"EmptyDirVolumeLimits in 1.37", 37, file(`{"entries":{"u1":{"EmptyDirVolumeLimits":{"v":"1Gi"}}}}`), nil},
		{"unknown release", 33, good, ErrUnknownRelease},
		{"unknown release 1.38", 38, good, ErrUnknownRelease},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cp, err := Parse([]byte(tc.b), tc.minor, nil)
			switch {
			case tc.want == nil && err != nil:
				t.Fatalf("Parse: %v", err)
			case tc.want == nil && cp == nil:
				t.Fatal("Parse returned no checkpoint")
			case tc.want != nil && !errors.Is(err, tc.want):
				t.Fatalf("Parse = %v, want %v", err, tc.want)
			}
			if errors.Is(err, ErrCorrupt) {
				var ce *CorruptError
				if !errors.As(err, &ce) || ce.Kubelet == "" || !strings.Contains(err.Error(), "delete the file") {
					t.Errorf("a corrupt file's error says the kubelet's words and what to do: %v", err)
				}
			}
			if errors.Is(err, ErrUnknownFormat) && !strings.Contains(err.Error(), fmt.Sprintf("kubelet 1.%d", tc.minor)) {
				t.Errorf("an unknown format's error names the release: %v", err)
			}
		})
	}
}

func TestParseInitContainersKept(t *testing.T) {
	for _, tc := range []struct {
		minor int
		gates map[string]bool
		want  bool
	}{
		{34, nil, false},
		{35, nil, false},
		{36, nil, true},
		{36, map[string]bool{GateInitContainers: false}, false},
		{37, nil, true},
		{37, map[string]bool{GateInitContainers: false}, true}, // locked on
	} {
		cp, err := Parse([]byte(file(oneEntry)), tc.minor, tc.gates)
		if err != nil {
			t.Fatal(err)
		}
		if got := cp.Pods[0].InitContainersKept; got != tc.want {
			t.Errorf("1.%d %v: InitContainersKept = %v, want %v", tc.minor, tc.gates, got, tc.want)
		}
	}
}

func TestWritten(t *testing.T) {
	off := map[string]bool{GateInPlacePodVerticalScaling: false}
	on := map[string]bool{GateInPlacePodVerticalScaling: true}
	for _, tc := range []struct {
		minor int
		gates map[string]bool
		want  bool
	}{
		{34, nil, true}, {34, off, false}, {34, on, true},
		{35, nil, true}, {35, off, true}, // locked: a kubelet told otherwise does not start
		{36, off, true}, {37, off, true},
		{33, nil, false}, {38, nil, false},
	} {
		if got := Written(tc.minor, tc.gates); got != tc.want {
			t.Errorf("Written(%d, %v) = %v, want %v", tc.minor, tc.gates, got, tc.want)
		}
	}
}

func TestRead(t *testing.T) {
	rel36 := kubeletversion.ByMinor(36)
	rel34 := kubeletversion.ByMinor(34)
	good := file(oneEntry)
	write := func(t *testing.T, content string) string {
		dir := t.TempDir()
		if err := os.WriteFile(filepath.Join(dir, FileName), []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	t.Run("good", func(t *testing.T) {
		dir := write(t, good)
		cp, err := Read(dir, rel36, nil)
		if err != nil {
			t.Fatal(err)
		}
		if cp.Path != filepath.Join(dir, FileName) || cp.Minor != 36 || len(cp.Pods) != 1 || cp.Pods[0].UID != "u1" {
			t.Errorf("Read = %+v", cp)
		}
	})
	t.Run("missing", func(t *testing.T) {
		dir := t.TempDir()
		_, err := Read(dir, rel36, nil)
		if !errors.Is(err, ErrNotExist) || !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), filepath.Join(dir, FileName)) {
			t.Errorf("Read = %v, want ErrNotExist and fs.ErrNotExist with the path", err)
		}
	})
	t.Run("gate off in 1.34: not read", func(t *testing.T) {
		_, err := Read(write(t, good), rel34, map[string]bool{GateInPlacePodVerticalScaling: false})
		if !errors.Is(err, ErrGateOff) {
			t.Errorf("Read = %v, want ErrGateOff", err)
		}
	})
	t.Run("unknown release", func(t *testing.T) {
		for _, rel := range []*kubeletversion.Release{nil, {Minor: 33}} {
			if _, err := Read(write(t, good), rel, nil); !errors.Is(err, ErrUnknownRelease) {
				t.Errorf("Read(%v) = %v, want ErrUnknownRelease", rel, err)
			}
		}
	})
	t.Run("symlink", func(t *testing.T) {
		dir := write(t, good)
		link := t.TempDir()
		if err := os.Symlink(filepath.Join(dir, FileName), filepath.Join(link, FileName)); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(link, rel36, nil); !errors.Is(err, statefile.ErrNotRegular) {
			t.Errorf("Read = %v, want statefile.ErrNotRegular", err)
		}
	})
	t.Run("directory", func(t *testing.T) {
		dir := t.TempDir()
		if err := os.Mkdir(filepath.Join(dir, FileName), 0o755); err != nil {
			t.Fatal(err)
		}
		if _, err := Read(dir, rel36, nil); !errors.Is(err, statefile.ErrNotRegular) {
			t.Errorf("Read = %v, want statefile.ErrNotRegular", err)
		}
	})
	t.Run("too large", func(t *testing.T) {
		dir := write(t, good+strings.Repeat(" ", statefile.MaxSize))
		if _, err := Read(dir, rel36, nil); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Read = %v, want ErrTooLarge", err)
		}
	})
	t.Run("corrupt names the path", func(t *testing.T) {
		dir := write(t, "garbage")
		_, err := Read(dir, rel36, nil)
		if !errors.Is(err, ErrCorrupt) || !strings.HasPrefix(err.Error(), "allocated: read "+filepath.Join(dir, FileName)+": ") {
			t.Errorf("Read = %v", err)
		}
	})
}

// TestGolden reads each release's checkpoint, written by that release's
// kubelet (test/kubeletcompat: go test -run TestAllocatedPodsReleaseRow
// -update-allocated-testdata, per release), and prints its pods, their
// requests and Shortfall for new allocatables, diffed with
// testdata/kubelet-1.<minor>.golden (-update rewrites them).
func TestGolden(t *testing.T) {
	names := kubeletstate.PodNames{
		"11111111-aaaa-4000-8000-000000000001": "default/web-0",
		"22222222-bbbb-4000-8000-000000000002": "default/web-1",
		"33333333-cccc-4000-8000-000000000003": "shop/db-0",
	}
	allocs := []struct {
		name  string
		alloc v1.ResourceList
	}{
		{"as before", list("cpu", "8", "memory", "8Gi", "hugepages-2Mi", "256Mi", "pods", "110")},
		{"cpu 8 -> 1", list("cpu", "1", "memory", "8Gi", "hugepages-2Mi", "256Mi", "pods", "110")},
		// 1.36+: the init container counted in full is over, at its
		// largest is not.
		{"cpu 8 -> 4500m", list("cpu", "4500m", "memory", "8Gi", "hugepages-2Mi", "256Mi", "pods", "110")},
		{"hugepages 256Mi -> 0", list("cpu", "8", "memory", "8Gi", "hugepages-2Mi", "0", "pods", "110")},
		{"memory 2Gi, pods 4", list("cpu", "8", "memory", "2Gi", "hugepages-2Mi", "256Mi", "pods", "4")},
	}
	files, err := filepath.Glob("testdata/kubelet-1.*.allocated_pods_state")
	if err != nil || len(files) == 0 {
		t.Fatalf("no testdata: %v", err)
	}
	for _, f := range files {
		var minor int
		if _, err := fmt.Sscanf(filepath.Base(f), "kubelet-1.%d.allocated_pods_state", &minor); err != nil {
			t.Fatal(err)
		}
		t.Run(fmt.Sprintf("1.%d", minor), func(t *testing.T) {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			cp, err := Parse(b, minor, nil)
			if err != nil {
				t.Fatal(err)
			}
			var out strings.Builder
			fmt.Fprintf(&out, "kubelet 1.%d, checksum %d, %d pods\n", minor, cp.Checksum, len(cp.Pods))
			for _, p := range cp.Pods {
				fmt.Fprintf(&out, "pod %s (init containers kept: %v)\n", p.UID, p.InitContainersKept)
				var cs []string
				for name := range p.Containers {
					cs = append(cs, name)
				}
				slices.Sort(cs)
				for _, name := range cs {
					fmt.Fprintf(&out, "  container %s: %s\n", name, render(p.Containers[name].Requests))
				}
				if p.PodLevel != nil {
					fmt.Fprintf(&out, "  pod-level: %s\n", render(p.PodLevel.Requests))
				}
				fmt.Fprintf(&out, "  requests: %s\n", render(p.Requests()))
				fmt.Fprintf(&out, "  at least: %s\n", render(p.MinRequests()))
			}
			for _, a := range allocs {
				fmt.Fprintf(&out, "allocatable %s (%s):\n  %s\n", a.name, render(a.alloc), Shortfall(a.alloc, cp.Pods).Describe(names))
			}
			golden := strings.TrimSuffix(f, ".allocated_pods_state") + ".golden"
			if *update {
				if err := os.WriteFile(golden, []byte(out.String()), 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(string(want), out.String()); diff != "" {
				t.Errorf("unexpected output (-want +got):\n%s", diff)
			}
		})
	}
}

func render(l v1.ResourceList) string {
	var parts []string
	for _, n := range slices.Sorted(maps.Keys(l)) {
		q := l[n]
		parts = append(parts, string(n)+"="+q.String())
	}
	if len(parts) == 0 {
		return "none"
	}
	return strings.Join(parts, " ")
}
