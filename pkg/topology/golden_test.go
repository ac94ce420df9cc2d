package topology_test

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/google/go-cmp/cmp"
	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/internal/fixturegen"
	"github.com/hotplugd/hotplugd/pkg/topology"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata/golden from the current output")

// goldenReport is what the golden files hold for each fixture.
type goldenReport struct {
	Snapshot    *topology.Snapshot `json:"snapshot"`
	Capacity    v1.ResourceList    `json:"capacity"`
	Allocatable v1.ResourceList    `json:"allocatable"`
}

// fixtureBase holds the extracted fixtures for the whole test binary: the
// large one has 19,000 members and takes seconds to unpack on a disk, so each
// is unpacked once, on tmpfs when the machine has /dev/shm.
var (
	fixtureBase string
	fixtureMu   sync.Mutex
	fixtureDirs = map[string]string{}
)

func TestMain(m *testing.M) {
	flag.Parse()
	base, err := os.MkdirTemp(shmOrTemp(), "hotplugd-topology-fixtures-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fixtureBase = base
	code := m.Run()
	os.RemoveAll(base)
	os.Exit(code)
}

func shmOrTemp() string {
	if fi, err := os.Stat("/dev/shm"); err == nil && fi.IsDir() {
		if f, err := os.CreateTemp("/dev/shm", "probe-"); err == nil {
			f.Close()
			os.Remove(f.Name())
			return "/dev/shm"
		}
	}
	return os.TempDir()
}

// extractFixture unpacks testdata/fixtures/<name>.tar.gz (once per test
// binary) and returns an FS rooted in it. Tests must not modify the tree.
func extractFixture(tb testing.TB, name string) topology.FS {
	tb.Helper()
	fixtureMu.Lock()
	defer fixtureMu.Unlock()
	dir, ok := fixtureDirs[name]
	if !ok {
		dir = filepath.Join(fixtureBase, name)
		if err := fixturegen.Extract(filepath.Join("testdata/fixtures", name+".tar.gz"), dir); err != nil {
			tb.Fatal(err)
		}
		fixtureDirs[name] = dir
	}
	return topology.NewFS(filepath.Join(dir, "sys"), filepath.Join(dir, "proc"))
}

func fixtureNames(t *testing.T) []string {
	t.Helper()
	paths, err := filepath.Glob("testdata/fixtures/*.tar.gz")
	if err != nil || len(paths) == 0 {
		t.Fatalf("no fixtures in testdata/fixtures: %v", err)
	}
	var names []string
	for _, p := range paths {
		names = append(names, strings.TrimSuffix(filepath.Base(p), ".tar.gz"))
	}
	return names
}

func TestGoldenSnapshots(t *testing.T) {
	for _, name := range fixtureNames(t) {
		t.Run(name, func(t *testing.T) {
			snap, err := extractFixture(t, name).Snapshot()
			if err != nil {
				t.Fatalf("Snapshot() error: %v", err)
			}
			alloc, err := snap.Allocatable(nil)
			if err != nil {
				t.Fatalf("Allocatable() error: %v", err)
			}
			got, err := json.MarshalIndent(goldenReport{snap, snap.Capacity(), alloc}, "", "  ")
			if err != nil {
				t.Fatal(err)
			}
			got = append(got, '\n')
			path := filepath.Join("testdata/golden", name+".json")
			if *update {
				if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
					t.Fatal(err)
				}
				if err := os.WriteFile(path, got, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			want, err := os.ReadFile(path)
			if err != nil {
				t.Fatalf("%v (run go test ./pkg/topology -run TestGoldenSnapshots -update to create it)", err)
			}
			if !bytes.Equal(want, got) {
				t.Errorf("unexpected snapshot of %s (-want +got):\n%s", name, cmp.Diff(string(want), string(got)))
			}
		})
	}
}
