package kubeletconfig

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
)

// fingerprintBase is a kubelet with a --config file and drop-ins, one of
// them in a subdirectory, for the Fingerprint and Files tests.
func fingerprintBase() fakeProc {
	return fakeProc{
		argv: []string{"/usr/bin/kubelet", "--config=/etc/kubernetes/kubelet.yaml", "--config-dir=/etc/kubernetes/kubelet.conf.d",
			"--v=2"},
		cwd: "/",
		files: map[string]string{
			"/etc/kubernetes/kubelet.yaml":                     cfgHead + "# tuned by ops\nsystemReserved:\n  cpu: 100m\n",
			"/etc/kubernetes/kubelet.conf.d/10-cpu.conf":       cfgHead + "cpuManagerPolicy: static\nreservedSystemCPUs: \"0\"\n",
			"/etc/kubernetes/kubelet.conf.d/README":            "not a drop-in",
			"/etc/kubernetes/kubelet.conf.d/20-sub/30-mm.conf": cfgHead + "memoryManagerPolicy: None\n",
		},
	}
}

func TestFingerprint(t *testing.T) {
	const pid = 10
	discover := func(t *testing.T, pid int, p fakeProc) *Kubelet {
		t.Helper()
		k, err := Discover(makeProc(t, withOthers(map[int]fakeProc{pid: p})))
		if err != nil {
			t.Fatalf("Discover() error: %v", err)
		}
		return k
	}
	base := discover(t, pid, fingerprintBase()).Fingerprint()
	if len(base) != 64 || strings.Trim(base, "0123456789abcdef") != "" {
		t.Fatalf("Fingerprint() = %q, want 64 hex digits", base)
	}
	tests := []struct {
		name   string
		pid    int
		change func(p *fakeProc)
		same   bool
	}{
		{name: "the same kubelet again", same: true, change: func(*fakeProc) {}},
		{name: "the same kubelet restarted: another PID, another root", pid: 4321, same: true, change: func(*fakeProc) {}},
		{name: "a file in the drop-in directory that is not a drop-in", same: true, change: func(p *fakeProc) {
			p.files["/etc/kubernetes/kubelet.conf.d/README"] = "edited"
		}},
		{name: "a comment in --config", change: func(p *fakeProc) {
			p.files["/etc/kubernetes/kubelet.yaml"] += "# another comment\n"
		}},
		{name: "systemReserved in --config", change: func(p *fakeProc) {
			p.files["/etc/kubernetes/kubelet.yaml"] = cfgHead + "systemReserved:\n  cpu: 200m\n"
		}},
		{name: "a drop-in's content", change: func(p *fakeProc) {
			p.files["/etc/kubernetes/kubelet.conf.d/10-cpu.conf"] += "# same settings\n"
		}},
		{name: "a drop-in in a subdirectory", change: func(p *fakeProc) {
			p.files["/etc/kubernetes/kubelet.conf.d/20-sub/30-mm.conf"] = cfgHead + "memoryManagerPolicy: Static\n"
		}},
		{name: "a new drop-in that changes nothing", change: func(p *fakeProc) {
			p.files["/etc/kubernetes/kubelet.conf.d/40-empty.conf"] = cfgHead
		}},
		{name: "a drop-in renamed, same order, same content", change: func(p *fakeProc) {
			f := p.files["/etc/kubernetes/kubelet.conf.d/10-cpu.conf"]
			delete(p.files, "/etc/kubernetes/kubelet.conf.d/10-cpu.conf")
			p.files["/etc/kubernetes/kubelet.conf.d/11-cpu.conf"] = f
		}},
		{name: "an argument hotplugd ignores", change: func(p *fakeProc) { p.argv[3] = "--v=4" }},
		{name: "a flag that overrides the files", change: func(p *fakeProc) {
			p.argv = append(p.argv, "--cpu-manager-policy=none")
		}},
		{name: "--root-dir", change: func(p *fakeProc) { p.argv = append(p.argv, "--root-dir=/data/kubelet") }},
		{name: "--experimental-allocatable-ignore-eviction", change: func(p *fakeProc) {
			p.argv = append(p.argv, "--experimental-allocatable-ignore-eviction")
		}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := fingerprintBase()
			tt.change(&p)
			pid := tt.pid
			if pid == 0 {
				pid = 10
			}
			got := discover(t, pid, p).Fingerprint()
			if same := got == base; same != tt.same {
				t.Errorf("Fingerprint() same as the base kubelet's: %v, want %v", same, tt.same)
			}
		})
	}
}

// TestFingerprintFields: what a caller changes on a Kubelet is part of its
// fingerprint (the RootDir an operator overrides), what says where hotplugd
// reads the files is not.
func TestFingerprintFields(t *testing.T) {
	k, err := Discover(makeProc(t, map[int]fakeProc{10: fingerprintBase()}))
	if err != nil {
		t.Fatal(err)
	}
	base := k.Fingerprint()
	for _, tt := range []struct {
		name   string
		change func(k *Kubelet)
		same   bool
	}{
		{"PID, FSRoot, Files and HealthzURL", func(k *Kubelet) {
			k.PID, k.FSRoot, k.Files, k.HealthzURL = 99, "/", nil, ""
		}, true},
		{"RootDir", func(k *Kubelet) { k.RootDir = "/data/kubelet" }, false},
		{"AllocatableIgnoresEviction", func(k *Kubelet) { k.AllocatableIgnoresEviction = true }, false},
		{"Cmdline", func(k *Kubelet) { k.Cmdline = append(k.Cmdline, "--v=4") }, false},
		{"the effective configuration", func(k *Kubelet) { k.Config.MaxPods = 250 }, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			c := *k
			c.Cmdline = append([]string(nil), k.Cmdline...)
			c.Config = k.Config.DeepCopy()
			tt.change(&c)
			if same := c.Fingerprint() == base; same != tt.same {
				t.Errorf("Fingerprint() unchanged: %v, want %v", same, tt.same)
			}
		})
	}
	if (&Kubelet{}).Fingerprint() == (&Kubelet{Config: Default()}).Fingerprint() {
		t.Error("a Kubelet without a configuration has the fingerprint of one with the defaults")
	}
}

func TestFiles(t *testing.T) {
	t.Run("another file system: under /proc/<pid>/root", func(t *testing.T) {
		procRoot := makeProc(t, map[int]fakeProc{10: fingerprintBase()})
		k, err := Discover(procRoot)
		if err != nil {
			t.Fatal(err)
		}
		root := filepath.Join(procRoot, "10", "root")
		want := []string{
			root + "/etc/kubernetes/kubelet.yaml",
			root + "/etc/kubernetes/kubelet.conf.d",
			root + "/etc/kubernetes/kubelet.conf.d/10-cpu.conf",
			root + "/etc/kubernetes/kubelet.conf.d/20-sub",
			root + "/etc/kubernetes/kubelet.conf.d/20-sub/30-mm.conf",
		}
		if diff := cmp.Diff(want, k.Files); diff != "" {
			t.Errorf("Files (-want +got):\n%s", diff)
		}
	})
	t.Run("the same file system: the kubelet's own paths", func(t *testing.T) {
		// /proc/<pid>/root is "/": the kubelet shares hotplugd's mounts.
		dir := t.TempDir()
		mustWrite(t, filepath.Join(dir, "kubelet.yaml"), cfgHead)
		mustWrite(t, filepath.Join(dir, "conf.d", "10.conf"), cfgHead+"cpuManagerPolicy: static\n")
		procRoot := filepath.Join(t.TempDir(), "proc")
		mustWrite(t, filepath.Join(procRoot, "7", "cmdline"), "kubelet\x00--config="+dir+"/kubelet.yaml\x00--config-dir="+dir+"/conf.d\x00")
		mustSymlink(t, "/", filepath.Join(procRoot, "7", "root"))
		k, err := Discover(procRoot)
		if err != nil {
			t.Fatal(err)
		}
		want := []string{dir + "/kubelet.yaml", dir + "/conf.d", dir + "/conf.d/10.conf"}
		if diff := cmp.Diff(want, k.Files); diff != "" {
			t.Errorf("Files (-want +got):\n%s", diff)
		}
	})
	t.Run("FromArgs under a mounted root, no drop-ins", func(t *testing.T) {
		root := t.TempDir()
		mustWrite(t, filepath.Join(root, "etc/kubernetes/kubelet.yaml"), cfgHead)
		k, err := FromArgs([]string{"--config", "/etc/kubernetes/kubelet.yaml"}, root)
		if err != nil {
			t.Fatal(err)
		}
		if diff := cmp.Diff([]string{root + "/etc/kubernetes/kubelet.yaml"}, k.Files); diff != "" {
			t.Errorf("Files (-want +got):\n%s", diff)
		}
	})
	t.Run("no --config, no --config-dir", func(t *testing.T) {
		k, err := FromArgs(nil, "/")
		if err != nil {
			t.Fatal(err)
		}
		if len(k.Files) != 0 {
			t.Errorf("Files = %q, want none", k.Files)
		}
	})
}

// TestDropinsReadConsistently: a drop-in written while the configuration is
// being built is read again, so that the fingerprint hashes the content the
// configuration was built from; one that never stops changing is an error.
func TestDropinsReadConsistently(t *testing.T) {
	root := t.TempDir()
	conf := filepath.Join(root, "d", "10.conf")
	mustWrite(t, conf, cfgHead+"cpuManagerPolicy: static\n")
	fsys := hostFS(root)

	writes := 0
	// The first build reads the file, then it is rewritten before the
	// second look: the first result is not used.
	racing := func(c *kubeletv1beta1.KubeletConfiguration, fsys hostFS, dir string) (*kubeletv1beta1.KubeletConfiguration, error) {
		out, err := applyDropins(c, fsys, dir)
		if writes == 0 {
			mustWrite(t, conf, cfgHead+"cpuManagerPolicy: none\n")
		}
		writes++
		return out, err
	}
	c, read, err := readDropins(Default(), fsys, "/d", racing)
	if err != nil {
		t.Fatal(err)
	}
	if writes != 2 || c.CPUManagerPolicy != "none" {
		t.Errorf("built %d times, policy %q; want 2 builds and the policy of the second content (none)", writes, c.CPUManagerPolicy)
	}
	if len(read.files) != 1 || read.files[0].path != "/d/10.conf" {
		t.Fatalf("drop-ins read = %+v", read.files)
	}
	b, _ := os.ReadFile(conf)
	if read.files[0].sum != sum(b) {
		t.Error("the hash is not the one of the content the configuration was built from")
	}

	always := func(c *kubeletv1beta1.KubeletConfiguration, fsys hostFS, dir string) (*kubeletv1beta1.KubeletConfiguration, error) {
		writes++
		mustWrite(t, conf, cfgHead+"maxPods: "+strconv.Itoa(writes)+"\n")
		return applyDropins(c, fsys, dir)
	}
	if _, _, err := readDropins(Default(), fsys, "/d", always); err == nil || !strings.Contains(err.Error(), "kept changing") {
		t.Errorf("readDropins with a drop-in rewritten every time = %v, want a kept-changing error", err)
	}
}

func TestStateDir(t *testing.T) {
	// A directory that exists in this file system at the same path as in
	// the kubelet's: a --root-dir the kubelet shares with hotplugd.
	shared := t.TempDir()
	tests := []struct {
		name     string
		k        func(t *testing.T) *Kubelet
		want     string // "": want the kubelet's RootDir
		wantErr  []string
		wantIsNE bool
	}{
		{
			name: "FSRoot /",
			k: func(t *testing.T) *Kubelet {
				k, err := FromArgs([]string{"--root-dir=/data/kubelet"}, "/")
				if err != nil {
					t.Fatal(err)
				}
				return k
			},
			want: "/data/kubelet",
		},
		{
			name: "the kubelet's root is / (same mount namespace)",
			k: func(t *testing.T) *Kubelet {
				procRoot := filepath.Join(t.TempDir(), "proc")
				mustWrite(t, filepath.Join(procRoot, "7", "cmdline"), "kubelet\x00--root-dir="+shared+"\x00")
				mustSymlink(t, "/", filepath.Join(procRoot, "7", "root"))
				return mustDiscover(t, procRoot)
			},
			want: shared,
		},
		{
			name: "another mount namespace, another directory at that path here",
			k: func(t *testing.T) *Kubelet {
				procRoot := makeProc(t, map[int]fakeProc{7: {
					argv: []string{"kubelet", "--root-dir=" + shared},
					dirs: []string{shared},
				}})
				return mustDiscover(t, procRoot)
			},
			wantErr: []string{"kubeletconfig: the kubelet's root dir " + shared + " (pid 7) is another directory in hotplugd's file system: ",
				"mount it into hotplugd at the same path", "path " + shared + " and mountPath " + shared, "--kubelet-root-dir",
				"under /proc/7/root is no use for a remedy: it disappears when the kubelet stops"},
		},
		{
			name: "another mount namespace, nothing at that path here",
			k: func(t *testing.T) *Kubelet {
				procRoot := makeProc(t, map[int]fakeProc{7: {
					argv: []string{"kubelet", "--root-dir=/nonexistent/kubelet"},
					dirs: []string{"/nonexistent/kubelet"},
				}})
				return mustDiscover(t, procRoot)
			},
			wantErr: []string{"kubeletconfig: the kubelet's root dir /nonexistent/kubelet (pid 7) is not visible in hotplugd's file system (stat /nonexistent/kubelet: ",
				"mount it into hotplugd at the same path", "path /nonexistent/kubelet and mountPath /nonexistent/kubelet"},
			wantIsNE: true,
		},
		{
			name: "the kubelet has no root dir yet",
			k: func(t *testing.T) *Kubelet {
				procRoot := makeProc(t, map[int]fakeProc{7: {argv: []string{"kubelet", "--root-dir=" + shared}}})
				return mustDiscover(t, procRoot)
			},
			wantErr:  []string{"kubeletconfig: the kubelet's root dir " + shared + " (pid 7): stat ", "/7/root" + shared},
			wantIsNE: true,
		},
		{
			name: "FromArgs under a root hotplugd mounted: the root dir under it",
			k: func(t *testing.T) *Kubelet {
				root := t.TempDir()
				k, err := FromArgs(nil, root)
				if err != nil {
					t.Fatal(err)
				}
				return k
			},
			want: "<fsroot>" + DefaultRootDir,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			k := tt.k(t)
			got, err := k.StateDir()
			if tt.wantErr != nil {
				if err == nil {
					t.Fatalf("StateDir() = %q, want an error", got)
				}
				for _, s := range tt.wantErr {
					if !strings.Contains(err.Error(), s) {
						t.Errorf("StateDir() error = %v, want it to contain %q", err, s)
					}
				}
				if tt.wantIsNE != errors.Is(err, fs.ErrNotExist) {
					t.Errorf("StateDir() error = %v, errors.Is ErrNotExist: %v, want %v", err, !tt.wantIsNE, tt.wantIsNE)
				}
				return
			}
			if err != nil {
				t.Fatalf("StateDir() error: %v", err)
			}
			want := strings.Replace(tt.want, "<fsroot>", k.FSRoot, 1)
			if got != want {
				t.Errorf("StateDir() = %q, want %q", got, want)
			}
		})
	}
}

func mustDiscover(t *testing.T, procRoot string) *Kubelet {
	t.Helper()
	k, err := Discover(procRoot)
	if err != nil {
		t.Fatalf("Discover() error: %v", err)
	}
	return k
}
