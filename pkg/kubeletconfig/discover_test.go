package kubeletconfig

import (
	"bufio"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

// fakeKubeletEnv makes the test binary a stand-in kubelet process (see
// TestMain and TestDiscoverRealProcess).
const fakeKubeletEnv = "HOTPLUGD_TEST_FAKE_KUBELET"

func TestMain(m *testing.M) {
	if os.Getenv(discoverEnv) == "1" {
		// Discover as a process without capabilities (see
		// TestDiscoverWithoutPtraceAccess): the result on stdout.
		k, err := Discover("/proc")
		if err != nil {
			fmt.Println("error:", err)
			os.Exit(0)
		}
		fmt.Printf("pid=%d fsroot=%s healthz=%s\n", k.PID, k.FSRoot, k.HealthzURL)
		os.Exit(0)
	}
	if os.Getenv(fakeKubeletEnv) == "1" {
		// Running: its exec is complete, argv in place (startFakeKubelet
		// waits for this line). Killed by the test; the deadline only
		// guards against leaks.
		fmt.Println("ready")
		time.Sleep(2 * time.Minute)
		os.Exit(0)
	}
	os.Exit(m.Run())
}

// discoverEnv makes the test binary run Discover and print what it found.
const discoverEnv = "HOTPLUGD_TEST_DISCOVER"

const cfgHead = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"

// fakeProc is one process of a fake procfs.
type fakeProc struct {
	argv    []string          // written NUL-separated; nil: no cmdline file (vanished)
	cwd     string            // target of the cwd symlink; "": no cwd link
	files   map[string]string // files of its root file system, by absolute path
	links   map[string]string // symlinks in its root file system: path -> target
	dirs    []string          // empty directories in its root file system
	rawArgv string            // cmdline content used instead of argv when set
}

// makeProc builds <tmp>/proc/<pid>/{cmdline,cwd,root} with each root a
// directory <tmp>/roots/<pid>, and returns the proc directory.
func makeProc(t *testing.T, procs map[int]fakeProc) string {
	t.Helper()
	tmp := t.TempDir()
	procRoot := filepath.Join(tmp, "proc")
	mustMkdir(t, procRoot)
	for pid, p := range procs {
		dir := filepath.Join(procRoot, strconv.Itoa(pid))
		root := filepath.Join(tmp, "roots", strconv.Itoa(pid))
		mustMkdir(t, dir)
		mustMkdir(t, root)
		switch {
		case p.rawArgv != "":
			mustWrite(t, filepath.Join(dir, "cmdline"), p.rawArgv)
		case p.argv != nil:
			mustWrite(t, filepath.Join(dir, "cmdline"), strings.Join(p.argv, "\x00")+"\x00")
		}
		if p.cwd != "" {
			mustSymlink(t, p.cwd, filepath.Join(dir, "cwd"))
		}
		mustSymlink(t, root, filepath.Join(dir, "root"))
		for name, body := range p.files {
			mustWrite(t, filepath.Join(root, name), body)
		}
		for name, target := range p.links {
			mustMkdir(t, filepath.Dir(filepath.Join(root, name)))
			mustSymlink(t, target, filepath.Join(root, name))
		}
		for _, d := range p.dirs {
			mustMkdir(t, filepath.Join(root, d))
		}
	}
	// Non-process entries of a real /proc.
	mustWrite(t, filepath.Join(procRoot, "meminfo"), "MemTotal: 1 kB\n")
	mustMkdir(t, filepath.Join(procRoot, "sys"))
	return procRoot
}

func mustMkdir(t *testing.T, dir string) {
	t.Helper()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
}

func mustWrite(t *testing.T, name, body string) {
	t.Helper()
	mustMkdir(t, filepath.Dir(name))
	if err := os.WriteFile(name, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
}

func mustSymlink(t *testing.T, target, name string) {
	t.Helper()
	if err := os.Symlink(target, name); err != nil {
		t.Fatal(err)
	}
}

// others are the processes of a node besides the kubelet.
var others = map[int]fakeProc{
	1:   {argv: []string{"/sbin/init"}},
	2:   {argv: []string{}},                                    // kernel thread: empty cmdline
	300: {argv: []string{"/usr/sbin/sshd", "-D"}},              // not a kubelet
	301: {argv: []string{"journalctl", "-u", "kubelet"}},       // names the kubelet, is not one
	302: {argv: []string{"/usr/local/bin/kubelet-wrapper.sh"}}, // base name differs
	303: {argv: []string{"hyperkube", "kube-apiserver"}},
	// hotplugd preflight's child asking the binary its version while the
	// kubelet runs: no second kubelet (issue 19).
	304:  {argv: []string{"/usr/bin/kubelet", "--version"}},
	9999: {argv: nil}, // vanished between ReadDir and the read
}

func withOthers(procs map[int]fakeProc) map[int]fakeProc {
	all := map[int]fakeProc{}
	for pid, p := range others {
		all[pid] = p
	}
	for pid, p := range procs {
		all[pid] = p
	}
	return all
}

// summary is the part of a Kubelet the Discover tests compare.
type summary struct {
	PID                        int
	ConfigPath, ConfigDir      string
	RootDir, HealthzURL        string
	AllocatableIgnoresEviction bool
	CPUManagerPolicy           string
	ReservedSystemCPUs         string
	MemoryManagerPolicy        string
	KubeReserved               map[string]string
	EvictionHard               map[string]string
	FeatureGates               map[string]bool
}

func summarize(k *Kubelet) summary {
	return summary{
		PID: k.PID, ConfigPath: k.ConfigPath, ConfigDir: k.ConfigDir,
		RootDir: k.RootDir, HealthzURL: k.HealthzURL, AllocatableIgnoresEviction: k.AllocatableIgnoresEviction,
		CPUManagerPolicy: k.Config.CPUManagerPolicy, ReservedSystemCPUs: k.Config.ReservedSystemCPUs,
		MemoryManagerPolicy: k.Config.MemoryManagerPolicy, KubeReserved: k.Config.KubeReserved,
		EvictionHard: k.Config.EvictionHard, FeatureGates: k.Config.FeatureGates,
	}
}

func TestDiscover(t *testing.T) {
	const kubeadmConfig = cfgHead + `cgroupDriver: systemd
cpuManagerPolicy: none
kubeReserved:
  cpu: 500m
  memory: 1Gi
featureGates:
  InPlaceNodeResourceResize: false
`
	kubeadmArgv := []string{
		"/usr/bin/kubelet",
		"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf", "--kubeconfig=/etc/kubernetes/kubelet.conf",
		"--config=/var/lib/kubelet/config.yaml",
		"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
		"--pod-infra-container-image=registry.k8s.io/pause:3.10", "--node-ip", "10.0.0.5",
		"--cpu-manager-policy", "static", "--reserved-cpus=0-1", "--fail-swap-on",
		"--feature-gates=InPlaceNodeResourceResize=true",
	}
	tests := []struct {
		name  string
		procs map[int]fakeProc
		want  summary
	}{
		{
			name: "kubeadm node: file, defaults, then flags",
			procs: withOthers(map[int]fakeProc{4242: {
				argv: kubeadmArgv, cwd: "/",
				files: map[string]string{"/var/lib/kubelet/config.yaml": kubeadmConfig},
			}}),
			want: summary{
				PID: 4242, ConfigPath: "/var/lib/kubelet/config.yaml",
				RootDir: "/var/lib/kubelet", HealthzURL: "http://127.0.0.1:10248/healthz",
				CPUManagerPolicy: "static", ReservedSystemCPUs: "0-1", MemoryManagerPolicy: "None",
				KubeReserved: map[string]string{"cpu": "500m", "memory": "1Gi"},
				EvictionHard: DefaultEvictionHard(),
				FeatureGates: map[string]bool{"InPlaceNodeResourceResize": true},
			},
		},
		{
			name: "relative --config, --root-dir and --config-dir against the kubelet's cwd",
			procs: withOthers(map[int]fakeProc{77: {
				argv: []string{"kubelet", "--config", "kubelet.yaml", "--root-dir", "../data/kubelet", "--config-dir=kubelet.conf.d"},
				cwd:  "/etc/kubernetes",
				files: map[string]string{
					"/etc/kubernetes/kubelet.yaml":                 cfgHead + "healthzPort: 10300\nhealthzBindAddress: 0.0.0.0\n",
					"/etc/kubernetes/kubelet.conf.d/10-cpu.conf":   cfgHead + "cpuManagerPolicy: static\n",
					"/etc/kubernetes/kubelet.conf.d/README":        "not a drop-in",
					"/kubelet.yaml":                                "not this one",
					"/etc/kubernetes/kubelet.conf.d/20-evict.conf": cfgHead + "evictionHard:\n  memory.available: 1Gi\n",
				},
			}}),
			want: summary{
				PID: 77, ConfigPath: "kubelet.yaml", ConfigDir: "kubelet.conf.d",
				RootDir: "/etc/data/kubelet", HealthzURL: "http://127.0.0.1:10300/healthz",
				CPUManagerPolicy: "static", MemoryManagerPolicy: "None",
				EvictionHard: map[string]string{
					"memory.available": "1Gi", "nodefs.available": "10%", "nodefs.inodesFree": "5%",
					"imagefs.available": "15%", "imagefs.inodesFree": "5%",
				},
			},
		},
		{
			name: "the config is an absolute symlink: followed inside the kubelet's root",
			procs: withOthers(map[int]fakeProc{10: {
				argv:  []string{"/usr/bin/kubelet", "--config=/etc/kubernetes/kubelet.yaml"},
				cwd:   "/",
				links: map[string]string{"/etc/kubernetes/kubelet.yaml": "/nix/store/abc-kubelet.yaml"},
				files: map[string]string{"/nix/store/abc-kubelet.yaml": cfgHead + "memoryManagerPolicy: Static\n"},
			}}),
			want: summary{
				PID: 10, ConfigPath: "/etc/kubernetes/kubelet.yaml",
				RootDir: "/var/lib/kubelet", HealthzURL: "http://127.0.0.1:10248/healthz",
				CPUManagerPolicy: "none", MemoryManagerPolicy: "Static", EvictionHard: DefaultEvictionHard(),
			},
		},
		{
			name: "no --config: defaults without eviction thresholds, and the flags",
			procs: withOthers(map[int]fakeProc{55: {
				argv: []string{"/usr/local/bin/kubelet", "--kube-reserved", "cpu=1", "--healthz-port=0",
					"--experimental-allocatable-ignore-eviction"},
			}}),
			want: summary{
				PID: 55, RootDir: "/var/lib/kubelet", HealthzURL: "", AllocatableIgnoresEviction: true,
				CPUManagerPolicy: "none", MemoryManagerPolicy: "None", KubeReserved: map[string]string{"cpu": "1"},
			},
		},
		{
			name: "hyperkube kubelet",
			procs: withOthers(map[int]fakeProc{8: {
				argv:  []string{"/hyperkube", "kubelet", "--config", "/k.yaml", "--root-dir=/data/kubelet/"},
				files: map[string]string{"/k.yaml": cfgHead + "reservedSystemCPUs: \"0\"\n"},
			}}),
			want: summary{
				PID: 8, ConfigPath: "/k.yaml", RootDir: "/data/kubelet", HealthzURL: "http://127.0.0.1:10248/healthz",
				CPUManagerPolicy: "none", ReservedSystemCPUs: "0", MemoryManagerPolicy: "None",
				EvictionHard: DefaultEvictionHard(),
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procRoot := makeProc(t, tt.procs)
			k, err := Discover(procRoot)
			if err != nil {
				t.Fatalf("Discover() error: %v", err)
			}
			if diff := cmp.Diff(tt.want, summarize(k)); diff != "" {
				t.Errorf("unexpected kubelet (-want +got):\n%s", diff)
			}
			pidDir := filepath.Join(procRoot, strconv.Itoa(k.PID))
			if k.FSRoot != filepath.Join(pidDir, "root") {
				t.Errorf("FSRoot = %q, want %s/root", k.FSRoot, pidDir)
			}
			if diff := cmp.Diff(tt.procs[k.PID].argv, k.Cmdline); diff != "" {
				t.Errorf("Cmdline (-want +got):\n%s", diff)
			}
		})
	}
}

func TestDiscoverErrors(t *testing.T) {
	kubelet := func(args ...string) fakeProc {
		return fakeProc{argv: append([]string{"/usr/bin/kubelet"}, args...), cwd: "/"}
	}
	tests := []struct {
		name     string
		procs    map[int]fakeProc
		procRoot string // instead of the fake tree
		wantIs   error
		wantErr  []string
	}{
		{
			name:    "no kubelet",
			procs:   others,
			wantIs:  ErrNotFound,
			wantErr: []string{"none of 7 processes under", "is hotplugd in the host's PID namespace?", "no kubelet process found"},
		},
		{
			name:    "two kubelets",
			procs:   withOthers(map[int]fakeProc{100: kubelet(), 20: kubelet("--config", "/a")}),
			wantIs:  ErrAmbiguous,
			wantErr: []string{"more than one kubelet process: PIDs 20, 100"},
		},
		{
			name:    "no process at all",
			procs:   map[int]fakeProc{},
			wantIs:  ErrNotFound,
			wantErr: []string{"no process under"},
		},
		{
			name:    "no command line could be read",
			procs:   map[int]fakeProc{1: {}, 2: {}},
			wantIs:  fs.ErrNotExist,
			wantErr: []string{"could not read the command line of any of 2 processes", "/cmdline"},
		},
		{
			name:     "procRoot missing",
			procRoot: "/nonexistent/proc",
			wantIs:   fs.ErrNotExist,
			wantErr:  []string{"kubeletconfig: find kubelet: open /nonexistent/proc"},
		},
		{
			name:    "config missing",
			procs:   withOthers(map[int]fakeProc{42: kubelet("--config", "/etc/kubernetes/kubelet.yaml")}),
			wantIs:  fs.ErrNotExist,
			wantErr: []string{"kubeletconfig: kubelet pid 42: read --config: open ", "/42/root/etc/kubernetes/kubelet.yaml"},
		},
		{
			name: "config is a directory",
			procs: withOthers(map[int]fakeProc{42: {
				argv: []string{"kubelet", "--config=/etc/kubernetes"},
				dirs: []string{"/etc/kubernetes"},
			}}),
			wantIs:  syscall.EISDIR,
			wantErr: []string{"read --config: read ", "/42/root/etc/kubernetes: is a directory"},
		},
		{
			name: "config is not a KubeletConfiguration",
			procs: withOthers(map[int]fakeProc{42: {
				argv:  []string{"kubelet", "--config=/k.yaml"},
				files: map[string]string{"/k.yaml": "apiVersion: v1\nkind: Pod\n"},
			}}),
			wantErr: []string{"parse --config ", "/42/root/k.yaml: apiVersion \"v1\" kind \"Pod\""},
		},
		{
			name:    "relative config, cwd unreadable",
			procs:   withOthers(map[int]fakeProc{42: {argv: []string{"kubelet", "--config", "k.yaml"}}}),
			wantIs:  fs.ErrNotExist,
			wantErr: []string{`resolve relative --config "k.yaml": working directory: readlink `, "/42/cwd"},
		},
		{
			name:    "command line the kubelet would refuse",
			procs:   withOthers(map[int]fakeProc{42: kubelet("--config")}),
			wantErr: []string{"kubelet pid 42: parse command line: flag needs an argument: --config"},
		},
		{
			name:    "flag the kubelet would refuse",
			procs:   withOthers(map[int]fakeProc{42: kubelet("--eviction-hard=memory.available=1Gi")}),
			wantErr: []string{`kubelet pid 42: flag --eviction-hard="memory.available=1Gi": malformed pair`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			procRoot := tt.procRoot
			if procRoot == "" {
				procRoot = makeProc(t, tt.procs)
			}
			k, err := Discover(procRoot)
			if err == nil {
				t.Fatalf("Discover() = PID %d, want an error", k.PID)
			}
			if tt.wantIs != nil && !errors.Is(err, tt.wantIs) {
				t.Errorf("Discover() error = %v, want errors.Is %v", err, tt.wantIs)
			}
			if tt.wantIs != ErrNotFound && errors.Is(err, ErrNotFound) {
				t.Errorf("Discover() error = %v, must not be ErrNotFound", err)
			}
			for _, s := range tt.wantErr {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("Discover() error = %v, want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestDiscoverUnreadableConfig(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root reads files whatever their mode")
	}
	procRoot := makeProc(t, map[int]fakeProc{42: {
		argv:  []string{"kubelet", "--config=/k.yaml"},
		files: map[string]string{"/k.yaml": cfgHead},
	}})
	if err := os.Chmod(filepath.Join(procRoot, "42", "root", "k.yaml"), 0); err != nil {
		t.Fatal(err)
	}
	_, err := Discover(procRoot)
	if !errors.Is(err, fs.ErrPermission) || !strings.Contains(err.Error(), "/42/root/k.yaml") {
		t.Errorf("Discover() error = %v, want a permission error naming the file", err)
	}
}

func TestDropins(t *testing.T) {
	tests := []struct {
		name    string
		args    []string // the kubelet's arguments besides --config-dir=/d
		files   map[string]string
		links   map[string]string
		want    func(c *kubeletv1beta1.KubeletConfiguration) // edits the configuration without drop-ins
		wantErr string
	}{
		{
			name: "maps merge key by key, null deletes, lists and scalars replace",
			args: []string{"--config=/c.yaml"},
			files: map[string]string{
				"/c.yaml": cfgHead + "kubeReserved:\n  cpu: \"1\"\n  memory: 1Gi\nreservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n",
				"/d/10.conf": cfgHead + "kubeReserved:\n  cpu: null\n  pid: \"100\"\nevictionHard:\n  memory.available: 2Gi\n" +
					"reservedMemory:\n- numaNode: 1\n  limits:\n    memory: 2Gi\n",
			},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.KubeReserved = map[string]string{"memory": "1Gi", "pid": "100"}
				c.EvictionHard["memory.available"] = "2Gi"
				c.ReservedMemory = []kubeletv1beta1.MemoryReservation{
					{NumaNode: 1, Limits: corev1.ResourceList{"memory": resource.MustParse("2Gi")}},
				}
			},
		},
		{
			name: "lexical order of the walk, subdirectories included, only *.conf",
			args: []string{"--config=/c.yaml"},
			files: map[string]string{
				"/c.yaml":               cfgHead,
				"/d/10-a.conf":          cfgHead + "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
				"/d/15-sub/1.conf":      cfgHead + "reservedSystemCPUs: \"1\"\n",
				"/d/20-b.conf":          cfgHead + "reservedSystemCPUs: \"2\"\nhealthzPort: 0\n",
				"/d/30-c.conf.disabled": cfgHead + "reservedSystemCPUs: \"3\"\n",
				"/d/.hidden":            "not yaml: [",
			},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.CPUManagerPolicy, c.ReservedSystemCPUs, c.HealthzPort = "static", "2", ptr.To[int32](0)
			},
		},
		{
			name:  "without --config: no default evictionHard either",
			files: map[string]string{"/d/10.conf": cfgHead + "memoryManagerPolicy: Static\n"},
			want:  func(c *kubeletv1beta1.KubeletConfiguration) { c.MemoryManagerPolicy = "Static" },
		},
		{
			name:  "flags win over drop-ins wherever they are",
			args:  []string{"--cpu-manager-policy=none", "--config=/c.yaml"},
			files: map[string]string{"/c.yaml": cfgHead, "/d/10.conf": cfgHead + "cpuManagerPolicy: static\n"},
			want:  func(c *kubeletv1beta1.KubeletConfiguration) {},
		},
		{
			name:  "a symlinked --config-dir is not walked, like filepath.WalkDir",
			args:  []string{"--config=/c.yaml"},
			files: map[string]string{"/c.yaml": cfgHead, "/real/10.conf": cfgHead + "cpuManagerPolicy: static\n"},
			links: map[string]string{"/d": "/real"},
			want:  func(c *kubeletv1beta1.KubeletConfiguration) {},
		},
		{
			name:  "a symlinked drop-in file is read, inside the root",
			args:  []string{"--config=/c.yaml"},
			files: map[string]string{"/c.yaml": cfgHead, "/real/x.yaml": cfgHead + "cpuManagerPolicy: static\n"},
			links: map[string]string{"/d/10.conf": "/real/x.yaml"},
			want:  func(c *kubeletv1beta1.KubeletConfiguration) { c.CPUManagerPolicy = "static" },
		},
		{
			name:    "drop-in without apiVersion",
			files:   map[string]string{"/d/10.conf": "cpuManagerPolicy: static\n"},
			wantErr: "/1/root/d/10.conf: apiVersion <nil> kind <nil>",
		},
		{
			name:    "empty drop-in",
			files:   map[string]string{"/d/10.conf": ""},
			wantErr: "/1/root/d/10.conf is empty",
		},
		{
			name:    "drop-in directory missing",
			wantErr: "walk --config-dir: lstat ",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			argv := append([]string{"kubelet", "--config-dir=/d"}, tt.args...)
			procRoot := makeProc(t, map[int]fakeProc{1: {argv: argv, cwd: "/", files: tt.files, links: tt.links}})
			k, err := Discover(procRoot)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Discover() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("Discover() error: %v", err)
			}
			base, err := FromArgs(tt.args, filepath.Join(procRoot, "1", "root"))
			if err != nil {
				t.Fatalf("FromArgs() error: %v", err)
			}
			want := base.Config
			tt.want(want)
			if diff := cmp.Diff(want, k.Config, quantityEqual); diff != "" {
				t.Errorf("unexpected configuration (-want +got):\n%s", diff)
			}
		})
	}
}

func TestFromArgs(t *testing.T) {
	root := t.TempDir()
	mustWrite(t, filepath.Join(root, "etc/kubernetes/kubelet.yaml"), cfgHead+"cpuManagerPolicy: static\n")

	t.Run("absolute path under fsRoot", func(t *testing.T) {
		k, err := FromArgs([]string{"--config", "/etc/kubernetes/kubelet.yaml"}, root)
		if err != nil {
			t.Fatal(err)
		}
		if k.PID != 0 || k.Config.CPUManagerPolicy != "static" || k.ConfigPath != "/etc/kubernetes/kubelet.yaml" ||
			k.FSRoot != root || k.RootDir != DefaultRootDir || k.HealthzURL != "http://127.0.0.1:10248/healthz" {
			t.Errorf("FromArgs() = %+v", k)
		}
		if diff := cmp.Diff([]string{"--config", "/etc/kubernetes/kubelet.yaml"}, k.Cmdline); diff != "" {
			t.Errorf("Cmdline (-want +got):\n%s", diff)
		}
	})
	t.Run("host path with fsRoot /", func(t *testing.T) {
		p := filepath.Join(root, "etc/kubernetes/kubelet.yaml")
		k, err := FromArgs([]string{"--config=" + p}, "/")
		if err != nil || k.Config.CPUManagerPolicy != "static" {
			t.Fatalf("FromArgs() = %+v, %v", k, err)
		}
	})
	t.Run("relative to hotplugd's working directory", func(t *testing.T) {
		t.Chdir(filepath.Join(root, "etc"))
		k, err := FromArgs([]string{"--config", "kubernetes/kubelet.yaml"}, "/")
		if err != nil || k.Config.CPUManagerPolicy != "static" {
			t.Fatalf("FromArgs() = %+v, %v", k, err)
		}
	})
	t.Run("no arguments: the kubelet's defaults", func(t *testing.T) {
		k, err := FromArgs(nil, root)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff(Default(), k.Config); diff != "" {
			t.Errorf("Config (-want +got):\n%s", diff)
		}
	})
	t.Run("errors name the file", func(t *testing.T) {
		_, err := FromArgs([]string{"--config", "/missing.yaml"}, root)
		if !errors.Is(err, fs.ErrNotExist) || !strings.Contains(err.Error(), "kubeletconfig: read --config: open "+filepath.Join(root, "missing.yaml")) {
			t.Errorf("FromArgs() error = %v", err)
		}
	})
	t.Run("a symlink does not leave fsRoot", func(t *testing.T) {
		mustSymlink(t, "../../../../../../etc/kubernetes/kubelet.yaml", filepath.Join(root, "escape.yaml"))
		k, err := FromArgs([]string{"--config", "/escape.yaml"}, root)
		if err != nil || k.Config.CPUManagerPolicy != "static" {
			t.Fatalf("FromArgs() = %+v, %v; want the file inside fsRoot", k, err)
		}
	})
}

func TestHealthzURL(t *testing.T) {
	tests := []struct {
		addr string
		port *int32
		want string
	}{
		{"127.0.0.1", ptr.To[int32](10248), "http://127.0.0.1:10248/healthz"},
		{"0.0.0.0", ptr.To[int32](10248), "http://127.0.0.1:10248/healthz"},
		{"::", ptr.To[int32](10248), "http://[::1]:10248/healthz"},
		{"::1", ptr.To[int32](10300), "http://[::1]:10300/healthz"},
		{"10.0.0.5", ptr.To[int32](10248), "http://10.0.0.5:10248/healthz"},
		{"010.000.0.5", ptr.To[int32](10248), "http://10.0.0.5:10248/healthz"},
		{"127.0.0.1", ptr.To[int32](0), ""},
		{"127.0.0.1", nil, ""},
	}
	for _, tt := range tests {
		c := Default()
		c.HealthzBindAddress, c.HealthzPort = tt.addr, tt.port
		if got := healthzURL(c); got != tt.want {
			t.Errorf("healthzURL(%s, %v) = %q, want %q", tt.addr, tt.port, got, tt.want)
		}
	}
}

func TestParseCmdline(t *testing.T) {
	tests := []struct {
		in   string
		want []string
	}{
		{"", nil},
		{"\x00", []string{""}},
		{"kubelet\x00", []string{"kubelet"}},
		{"/usr/bin/kubelet\x00--config\x00/a b.yaml\x00", []string{"/usr/bin/kubelet", "--config", "/a b.yaml"}},
		{"kubelet\x00--x=\x00\x00", []string{"kubelet", "--x=", ""}},
		{"no-trailing-nul", []string{"no-trailing-nul"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, parseCmdline([]byte(tt.in))); diff != "" {
			t.Errorf("parseCmdline(%q) (-want +got):\n%s", tt.in, diff)
		}
	}
}

func TestKubeletArgs(t *testing.T) {
	tests := []struct {
		argv []string
		want []string
	}{
		{[]string{"kubelet"}, []string{}},
		{[]string{"/usr/bin/kubelet", "--config=/a"}, []string{"--config=/a"}},
		{[]string{"hyperkube", "kubelet", "--config=/a"}, []string{"--config=/a"}},
		{[]string{"/usr/local/bin/hyperkube", "kubelet"}, []string{}},
		{[]string{"hyperkube", "kube-proxy"}, nil},
		{[]string{"hyperkube"}, nil},
		{[]string{"kubelet.sh"}, nil},
		{[]string{"/kubelet/sh"}, nil},
		{[]string{""}, nil},
		{nil, nil},
		// `kubelet --version`, as hotplugd preflight runs it while the
		// kubelet runs (issue 19: it was found as a second kubelet).
		{[]string{"/usr/bin/kubelet", "--version"}, nil},
		{[]string{"/usr/bin/kubelet", "--version=raw"}, nil},
		{[]string{"hyperkube", "kubelet", "--version"}, nil},
		{[]string{"kubelet", "-h"}, nil},
		{[]string{"/usr/bin/kubelet", "--config=/a", "--v=2"}, []string{"--config=/a", "--v=2"}},
	}
	for _, tt := range tests {
		if diff := cmp.Diff(tt.want, kubeletArgs(tt.argv)); diff != "" {
			t.Errorf("kubeletArgs(%q) (-want +got):\n%s", tt.argv, diff)
		}
	}
}

// TestDiscoverRealProcess runs the test binary as a process named "kubelet"
// and finds it in the real /proc, reading its relative --config through
// /proc/<pid>/cwd and /proc/<pid>/root.
func TestDiscoverRealProcess(t *testing.T) {
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "cfg.yaml"), cfgHead+"cpuManagerPolicy: static\nhealthzPort: 10999\n")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	pid := startFakeKubelet(t, self, dir, "--config", "cfg.yaml", "--root-dir", filepath.Join(dir, "root"), "--v=2", "--fail-swap-on")
	k, err := Discover("/proc")
	if errors.Is(err, ErrAmbiguous) && strings.Contains(err.Error(), strconv.Itoa(pid)) {
		t.Skipf("another kubelet runs on this machine: %v", err)
	}
	if err != nil {
		t.Fatalf("Discover(/proc) error: %v", err)
	}
	if k.PID != pid {
		t.Fatalf("Discover(/proc) found PID %d (%q), want %d", k.PID, k.Cmdline, pid)
	}
	want := summary{
		PID: pid, ConfigPath: "cfg.yaml", RootDir: filepath.Join(dir, "root"),
		HealthzURL: "http://127.0.0.1:10999/healthz", CPUManagerPolicy: "static", MemoryManagerPolicy: "None",
		EvictionHard: DefaultEvictionHard(),
	}
	if diff := cmp.Diff(want, summarize(k)); diff != "" {
		t.Errorf("unexpected kubelet (-want +got):\n%s", diff)
	}
	if k.FSRoot != "/proc/"+strconv.Itoa(pid)+"/root" {
		t.Errorf("FSRoot = %q", k.FSRoot)
	}
	// The same mount namespace: the kubelet's paths are hotplugd's.
	if diff := cmp.Diff([]string{filepath.Join(dir, "cfg.yaml")}, k.Files); diff != "" {
		t.Errorf("Files (-want +got):\n%s", diff)
	}
	mustMkdir(t, k.RootDir)
	if got, err := k.StateDir(); err != nil || got != k.RootDir {
		t.Errorf("StateDir() = %q, %v, want %s", got, err, k.RootDir)
	}
	if start, err := ProcessStart("/proc", pid); err != nil || start == 0 {
		t.Errorf("ProcessStart(/proc, %d) = %d, %v", pid, start, err)
	}
}

// TestDiscoverWithoutPtraceAccess: a process without CAP_SYS_PTRACE (a
// DaemonSet pod that drops capabilities) may not open /proc/<pid>/root of a
// kubelet that has more capabilities than it; Discover then reads the
// configuration at the same path in its own file system, and says what to
// do about a relative one.
func TestDiscoverWithoutPtraceAccess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("SKIPPED: needs root, to run the kubelet with more capabilities than the discovering process")
	}
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		t.Skipf("SKIPPED: no setpriv (util-linux) to drop capabilities: %v", err)
	}
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	mustWrite(t, filepath.Join(dir, "cfg.yaml"), cfgHead+"healthzPort: 10998\n")
	for _, tt := range []struct {
		name, config, want string
	}{
		{"absolute config", filepath.Join(dir, "cfg.yaml"), "fsroot=/ healthz=http://127.0.0.1:10998/healthz"},
		{"relative config", "cfg.yaml", "no ptrace access to the kubelet: give --kubelet-config"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			startFakeKubelet(t, self, dir, "--config", tt.config)
			out, err := exec.Command(setpriv, "--bounding-set=-all", "--inh-caps=-all", "--", "env", discoverEnv+"=1", self).CombinedOutput()
			if err != nil {
				t.Fatalf("%v: %s", err, out)
			}
			if strings.Contains(string(out), "ErrAmbiguous") || strings.Contains(string(out), "more than one") {
				t.Skipf("another kubelet runs on this machine: %s", out)
			}
			if !strings.Contains(string(out), tt.want) {
				t.Errorf("Discover without capabilities: %q, want it to contain %q", out, tt.want)
			}
		})
	}
}

// startFakeKubelet starts the test binary as a stand-in kubelet process
// (argv[0] "kubelet", then args) in dir, killed at the test's end (and with
// the test), and returns its PID once it runs. Not as soon as exec.Cmd.Start
// returns: Start returns when the exec has closed the close-on-exec pipe,
// before the kernel has set the new program's argv (/proc/<pid>/cmdline is
// empty until then; under load a Discover in that window finds no kubelet,
// as a CI run did). The child's first line says it runs.
func startFakeKubelet(t *testing.T, self, dir string, args ...string) int {
	t.Helper()
	cmd := &exec.Cmd{
		Path: self,
		Args: append([]string{"kubelet"}, args...),
		Dir:  dir,
		Env:  append(os.Environ(), fakeKubeletEnv+"=1"),
		// The fake kubelet dies with the test.
		SysProcAttr: &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL},
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
	})
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil || line != "ready\n" {
		t.Fatalf("the fake kubelet did not start: %q, %v", line, err)
	}
	return cmd.Process.Pid
}

// TestPodLogsDir: the kubelet's podLogsDir (its default when unset) where
// hotplugd reads it: like the configuration files, the path itself when it
// is the same directory here, else the path under the kubelet's root.
func TestPodLogsDir(t *testing.T) {
	// A directory at the same path here and in the kubelet's file system.
	shared := t.TempDir()
	config := func(podLogsDir string) string { return cfgHead + "podLogsDir: " + podLogsDir + "\n" }
	tests := []struct {
		name string
		k    func(t *testing.T) *Kubelet
		want string // <fsroot> stands for the kubelet's FSRoot
	}{
		{
			name: "unset: the kubelet's default",
			k: func(t *testing.T) *Kubelet {
				k, err := FromArgs(nil, "/")
				if err != nil {
					t.Fatal(err)
				}
				return k
			},
			want: DefaultPodLogsDir,
		},
		{
			name: "no configuration at all",
			k:    func(*testing.T) *Kubelet { return &Kubelet{} },
			want: DefaultPodLogsDir,
		},
		{
			name: "set in the configuration file",
			k: func(t *testing.T) *Kubelet {
				root := t.TempDir()
				mustWrite(t, filepath.Join(root, "kubelet.yaml"), config("/data/pod-logs"))
				k, err := FromArgs([]string{"--config", filepath.Join(root, "kubelet.yaml")}, "/")
				if err != nil {
					t.Fatal(err)
				}
				return k
			},
			want: "/data/pod-logs",
		},
		{
			name: "relative: the kubelet refuses it",
			k: func(t *testing.T) *Kubelet {
				root := t.TempDir()
				mustWrite(t, filepath.Join(root, "kubelet.yaml"), config("pod-logs"))
				k, err := FromArgs([]string{"--config", filepath.Join(root, "kubelet.yaml")}, "/")
				if err != nil {
					t.Fatal(err)
				}
				return k
			},
			want: "",
		},
		{
			name: "the kubelet's root is / (same mount namespace)",
			k: func(t *testing.T) *Kubelet {
				procRoot := filepath.Join(t.TempDir(), "proc")
				mustWrite(t, filepath.Join(shared, "kubelet.yaml"), config(shared))
				mustWrite(t, filepath.Join(procRoot, "7", "cmdline"), "kubelet\x00--config="+filepath.Join(shared, "kubelet.yaml")+"\x00")
				mustSymlink(t, "/", filepath.Join(procRoot, "7", "root"))
				return mustDiscover(t, procRoot)
			},
			want: shared,
		},
		{
			name: "another mount namespace: under the kubelet's root",
			k: func(t *testing.T) *Kubelet {
				procRoot := makeProc(t, map[int]fakeProc{7: {
					argv:  []string{"kubelet", "--config=/etc/kubernetes/kubelet.yaml"},
					files: map[string]string{"/etc/kubernetes/kubelet.yaml": config(shared)},
					dirs:  []string{shared},
				}})
				return mustDiscover(t, procRoot)
			},
			want: "<fsroot>" + shared,
		},
		{
			name: "FromArgs under a root hotplugd mounted",
			k: func(t *testing.T) *Kubelet {
				k, err := FromArgs(nil, t.TempDir())
				if err != nil {
					t.Fatal(err)
				}
				return k
			},
			want: "<fsroot>" + DefaultPodLogsDir,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := tt.k(t)
			want := strings.Replace(tt.want, "<fsroot>", k.FSRoot, 1)
			if got := k.PodLogsDir(); got != want {
				t.Errorf("PodLogsDir() = %q, want %q", got, want)
			}
		})
	}
}
