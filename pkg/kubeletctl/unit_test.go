package kubeletctl

import (
	"errors"
	"io/fs"
	"maps"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"

	sdbus "github.com/coreos/go-systemd/v22/dbus"
	"github.com/godbus/dbus/v5"
	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

func TestParseUnitName(t *testing.T) {
	tests := []struct{ in, want string }{
		{"kubelet", "kubelet.service"},
		{"kubelet.service", "kubelet.service"},
		{"kubelet.socket", "kubelet.socket"},
		{"snap.kubelite.daemon-kubelite", "snap.kubelite.daemon-kubelite.service"},
		{"snap.kubelite.daemon-kubelite.service", "snap.kubelite.daemon-kubelite.service"},
		{"kubelet@1.service", "kubelet@1.service"},
		{"", ""},
	}
	for _, tt := range tests {
		if got := ParseUnitName(tt.in); got != tt.want {
			t.Errorf("ParseUnitName(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestUnitMasked(t *testing.T) {
	tests := []struct {
		load, file string
		want       bool
	}{
		{"loaded", "enabled", false},
		{"loaded", "static", false},
		{"masked", "masked", true},
		{"masked", "", true},
		{"loaded", "masked-runtime", true},
		{"not-found", "", false},
	}
	for _, tt := range tests {
		u := &Unit{LoadState: tt.load, UnitFileState: tt.file}
		if got := u.Masked(); got != tt.want {
			t.Errorf("Masked() of LoadState %q, UnitFileState %q = %v, want %v", tt.load, tt.file, got, tt.want)
		}
	}
}

// preflightPre is the ExecStartPre of deploy/systemd's preflight drop-in.
var preflightPre = ExecCommand{
	Path: "/usr/local/bin/hotplugd",
	Argv: strings.Fields("/usr/local/bin/hotplugd preflight $HOTPLUGD_PREFLIGHT_ARGS -- $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS"),
}

func TestUnitPreflight(t *testing.T) {
	other := ExecCommand{Path: "/usr/bin/mkdir", Argv: []string{"/usr/bin/mkdir", "-p", "/var/lib/kubelet"}}
	tests := []struct {
		name   string
		pre    []ExecCommand
		want   ExecCommand
		wantOK bool
	}{
		{name: "none"},
		{name: "other commands only", pre: []ExecCommand{other}},
		{name: "the drop-in's", pre: []ExecCommand{other, preflightPre}, want: preflightPre, wantOK: true},
		{
			name:   "ignoring failures",
			pre:    []ExecCommand{{Path: "/opt/bin/hotplugd", Argv: []string{"/opt/bin/hotplugd", "preflight"}, IgnoreFailure: true}},
			want:   ExecCommand{Path: "/opt/bin/hotplugd", Argv: []string{"/opt/bin/hotplugd", "preflight"}, IgnoreFailure: true},
			wantOK: true,
		},
		{
			name:   "argv[0] set with @",
			pre:    []ExecCommand{{Path: "/opt/hotplugd/bin/hotplugd-v2", Argv: []string{"hotplugd", "preflight", "--", "--config=/c"}}},
			want:   ExecCommand{Path: "/opt/hotplugd/bin/hotplugd-v2", Argv: []string{"hotplugd", "preflight", "--", "--config=/c"}},
			wantOK: true,
		},
		{name: "another subcommand", pre: []ExecCommand{{Path: "/usr/local/bin/hotplugd", Argv: []string{"/usr/local/bin/hotplugd", "version"}}}},
		{name: "another program's preflight", pre: []ExecCommand{{Path: "/usr/bin/kubeadm", Argv: []string{"/usr/bin/kubeadm", "preflight"}}}},
		{name: "through a shell", pre: []ExecCommand{{Path: "/bin/sh", Argv: []string{"/bin/sh", "-c", "hotplugd preflight"}}}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := (&Unit{ExecStartPre: tt.pre}).Preflight()
			if ok != tt.wantOK {
				t.Errorf("Preflight() found %v, want %v", ok, tt.wantOK)
			}
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("unexpected command (-want +got):\n%s", diff)
			}
		})
	}
}

// kubeadmUnit is kubelet.service as kubeadm's packages install it, with
// deploy/systemd's preflight drop-in.
func kubeadmUnit() *Unit {
	return &Unit{
		Name:          "kubelet.service",
		LoadState:     "loaded",
		ActiveState:   "active",
		SubState:      "running",
		UnitFileState: "enabled",
		MainPID:       4242,
		ExecStart: ExecCommand{
			Path: "/usr/bin/kubelet",
			Argv: strings.Fields("/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS"),
		},
		ExecStartPre: []ExecCommand{preflightPre},
		Environment: []string{
			"KUBELET_KUBECONFIG_ARGS=--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf",
			"KUBELET_CONFIG_ARGS=--config=/var/lib/kubelet/config.yaml",
			"HOTPLUGD_PREFLIGHT_ARGS=",
		},
		EnvironmentFiles: []EnvFile{
			{Path: "/var/lib/kubelet/kubeadm-flags.env", Optional: true},
			{Path: "/etc/default/kubelet", Optional: true},
			{Path: "/etc/sysconfig/kubelet", Optional: true},
			{Path: "/etc/default/hotplugd", Optional: true},
		},
		DropInPaths:  []string{"/usr/lib/systemd/system/kubelet.service.d/10-kubeadm.conf", "/etc/systemd/system/kubelet.service.d/10-hotplugd-preflight.conf"},
		FragmentPath: "/usr/lib/systemd/system/kubelet.service",
	}
}

// kubeadmCmdline is kubeadmUnit's kubelet with only kubeadm-flags.env.
var kubeadmCmdline = []string{
	"/usr/bin/kubelet",
	"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
	"--kubeconfig=/etc/kubernetes/kubelet.conf",
	"--config=/var/lib/kubelet/config.yaml",
	"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
	"--pod-infra-container-image=registry.k8s.io/pause:3.10",
}

// fakeFiles is a readFile over files, failing like os.ReadFile.
func fakeFiles(files map[string]string) func(string) ([]byte, error) {
	return func(name string) ([]byte, error) {
		s, ok := files[name]
		switch {
		case !ok:
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrNotExist}
		case s == "EACCES":
			return nil, &fs.PathError{Op: "open", Path: name, Err: fs.ErrPermission}
		}
		return []byte(s), nil
	}
}

func TestUnitCommandLine(t *testing.T) {
	flags := map[string]string{"/var/lib/kubelet/kubeadm-flags.env": kubeadmFlags}
	with := func(m map[string]string, path, content string) map[string]string {
		n := map[string]string{path: content}
		for k, v := range m {
			n[k] = v
		}
		return n
	}
	tests := []struct {
		name    string
		change  func(u *Unit)
		files   map[string]string
		procEnv map[string]string
		want    []string
		wantErr string // "" means success
		errIs   error
	}{
		{
			name:  "kubeadm, no extra args",
			files: flags,
			want:  kubeadmCmdline,
		},
		{
			name:  "kubeadm, an empty /etc/default/kubelet",
			files: with(flags, "/etc/default/kubelet", "KUBELET_EXTRA_ARGS=\n"),
			want:  kubeadmCmdline,
		},
		{
			name:  "kubeadm with extra args",
			files: with(flags, "/etc/default/kubelet", "# set by the installer\nKUBELET_EXTRA_ARGS='--node-ip=10.0.0.2 --cpu-manager-policy=static'\n"),
			want:  append(append([]string(nil), kubeadmCmdline...), "--node-ip=10.0.0.2", "--cpu-manager-policy=static"),
		},
		{
			name:  "an environment file overrides Environment=, a later file an earlier one",
			files: with(with(flags, "/etc/default/kubelet", "KUBELET_CONFIG_ARGS=--config=/a\nKUBELET_EXTRA_ARGS=--v=2"), "/etc/sysconfig/kubelet", "KUBELET_EXTRA_ARGS=--v=4"),
			want: []string{
				"/usr/bin/kubelet",
				"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
				"--kubeconfig=/etc/kubernetes/kubelet.conf",
				"--config=/a",
				"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
				"--pod-infra-container-image=registry.k8s.io/pause:3.10",
				"--v=4",
			},
		},
		{
			name:    "the manager's environment (systemctl set-environment) is used",
			files:   flags,
			procEnv: map[string]string{"PATH": "/usr/bin", "KUBELET_EXTRA_ARGS": "--v=3"},
			want:    append(append([]string(nil), kubeadmCmdline...), "--v=3"),
		},
		{
			name:    "the unit's variables override the manager's",
			files:   flags,
			procEnv: map[string]string{"KUBELET_CONFIG_ARGS": "--config=/other"},
			want:    kubeadmCmdline,
		},
		{
			name:    "UnsetEnvironment= by name",
			change:  func(u *Unit) { u.UnsetEnvironment = []string{"KUBELET_KUBEADM_ARGS", "KUBELET_EXTRA_ARGS"} },
			files:   flags,
			procEnv: map[string]string{"KUBELET_EXTRA_ARGS": "--v=3"},
			want:    kubeadmCmdline[:4],
		},
		{
			name: "UnsetEnvironment= by assignment",
			change: func(u *Unit) {
				u.UnsetEnvironment = []string{"KUBELET_EXTRA_ARGS=--v=3", "KUBELET_CONFIG_ARGS=--config=/other"}
			},
			files:   flags,
			procEnv: map[string]string{"KUBELET_EXTRA_ARGS": "--v=3"},
			want:    kubeadmCmdline,
		},
		{
			name:   "no expansion with the : prefix",
			change: func(u *Unit) { u.ExecStart.NoEnvExpand = true },
			files:  flags,
			want:   kubeadmUnit().ExecStart.Argv,
		},
		{
			name: "argv[0] as set with @",
			change: func(u *Unit) {
				u.ExecStart = ExecCommand{Path: "/opt/k8s/kubelet-1.36", Argv: []string{"kubelet", "$KUBELET_CONFIG_ARGS"}}
			},
			want: []string{"kubelet", "--config=/var/lib/kubelet/config.yaml"},
		},
		{
			name:   "a variable systemd sets, set by the unit",
			change: func(u *Unit) { u.ExecStart.Argv = append(u.ExecStart.Argv, "--log-file=/var/log/${HOME}.log") },
			files:  with(flags, "/etc/default/hotplugd", "HOME=/root\n"),
			want:   append(append([]string(nil), kubeadmCmdline...), "--log-file=/var/log//root.log"),
		},
		{
			name: "a variable of PassEnvironment=, unset by the unit",
			change: func(u *Unit) {
				u.PassEnvironment, u.UnsetEnvironment = []string{"KUBELET_EXTRA_ARGS"}, []string{"KUBELET_EXTRA_ARGS"}
			},
			files: flags,
			want:  kubeadmCmdline,
		},
		{
			name:  "an unreadable optional file is skipped when systemd refuses it too",
			files: with(flags, "/etc/default/kubelet", "KUBELET_EXTRA_ARGS=\xff\n"),
			want:  kubeadmCmdline,
		},
		{
			name:    "a variable systemd sets for each start",
			change:  func(u *Unit) { u.ExecStart.Argv = append(u.ExecStart.Argv, "--id=${INVOCATION_ID}", "$MAINPID") },
			files:   flags,
			procEnv: map[string]string{"INVOCATION_ID": "x"},
			wantErr: "kubeletctl: kubelet.service: /usr/bin/kubelet uses $INVOCATION_ID (set by systemd for each start), $MAINPID (set by systemd for each start), whose value cannot be known beforehand",
		},
		{
			name:    "a variable of PassEnvironment=",
			change:  func(u *Unit) { u.PassEnvironment = []string{"KUBELET_EXTRA_ARGS"} },
			files:   flags,
			procEnv: map[string]string{"KUBELET_EXTRA_ARGS": "--v=3"},
			wantErr: "uses $KUBELET_EXTRA_ARGS (PassEnvironment=, from systemd's own process environment)",
		},
		{
			name:    "a required file that is missing",
			change:  func(u *Unit) { u.EnvironmentFiles[1].Optional = false },
			files:   flags,
			wantErr: `kubeletctl: kubelet.service: EnvironmentFile=/etc/default/kubelet: open /etc/default/kubelet: file does not exist: systemd would fail the start (the file is required: no "-" before it)`,
			errIs:   fs.ErrNotExist,
		},
		{
			name:    "a required file systemd refuses",
			change:  func(u *Unit) { u.EnvironmentFiles[0].Optional = false },
			files:   map[string]string{"/var/lib/kubelet/kubeadm-flags.env": "A=\xff"},
			wantErr: "EnvironmentFile=/var/lib/kubelet/kubeadm-flags.env: line 1: invalid UTF-8 in the value of A (systemd refuses the file): systemd would fail the start",
		},
		{
			name:    "an optional file that cannot be read",
			files:   with(flags, "/etc/default/kubelet", "EACCES"),
			wantErr: "EnvironmentFile=/etc/default/kubelet: open /etc/default/kubelet: permission denied: cannot tell whether systemd reads it",
			errIs:   fs.ErrPermission,
		},
		{
			name:    "a file systemd versions read differently",
			files:   with(flags, "/etc/default/kubelet", "# KUBELET_EXTRA_ARGS=--v=2 \\\nKUBELET_EXTRA_ARGS=--v=4\n"),
			wantErr: "EnvironmentFile=/etc/default/kubelet: line 2: the line before is a comment ending in a backslash",
			errIs:   ErrVersionDependent,
		},
		{
			name: "a glob pattern",
			change: func(u *Unit) {
				u.EnvironmentFiles = append(u.EnvironmentFiles, EnvFile{Path: "/etc/kubelet.d/*.env", Optional: true})
			},
			files:   flags,
			wantErr: "EnvironmentFile=/etc/kubelet.d/*.env: a glob pattern",
		},
		{
			name:    "a relative path",
			change:  func(u *Unit) { u.EnvironmentFiles = []EnvFile{{Path: "kubelet.env"}} },
			wantErr: "EnvironmentFile=kubelet.env: not an absolute path: systemd would fail the start",
		},
		{
			name:    "through the user's shell",
			change:  func(u *Unit) { u.ExecStart.ViaShell = true },
			files:   flags,
			wantErr: `kubeletctl: kubelet.service: /usr/bin/kubelet runs through the user's shell (the "|" prefix)`,
		},
		{
			name:    "no ExecStart",
			change:  func(u *Unit) { u.ExecStart = ExecCommand{} },
			wantErr: "kubeletctl: kubelet.service: no command to run",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			u := kubeadmUnit()
			if tt.change != nil {
				tt.change(u)
			}
			got, err := u.CommandLine(fakeFiles(tt.files), tt.procEnv)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("CommandLine error = %v, want one containing %q", err, tt.wantErr)
				}
				if tt.errIs != nil && !errors.Is(err, tt.errIs) {
					t.Errorf("error %q does not match %v", err, tt.errIs)
				}
				return
			}
			if err != nil {
				t.Fatalf("CommandLine: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("unexpected command line (-want +got):\n%s", diff)
			}
		})
	}
}

// TestUnitExpandPreflight checks that the preflight drop-in gives hotplugd
// the words the kubelet gets after its binary.
func TestUnitExpandPreflight(t *testing.T) {
	u := kubeadmUnit()
	files := fakeFiles(map[string]string{
		"/var/lib/kubelet/kubeadm-flags.env": kubeadmFlags,
		"/etc/default/kubelet":               "KUBELET_EXTRA_ARGS=--v=2",
		"/etc/default/hotplugd":              "HOTPLUGD_PREFLIGHT_ARGS=--allow-drop-assignments",
	})
	pre, ok := u.Preflight()
	if !ok {
		t.Fatal("no preflight")
	}
	kubelet, err := u.CommandLine(files, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, err := u.ExpandCommand(pre, files, nil)
	if err != nil {
		t.Fatal(err)
	}
	want := append([]string{"/usr/local/bin/hotplugd", "preflight", "--allow-drop-assignments", "--"}, kubelet[1:]...)
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("unexpected preflight command line (-want +got):\n%s", diff)
	}
}

// execEntry is an element of a(sasbttttuii), execExEntry of
// a(sasasttttuii), envFileEntry of a(sb): what systemd sends for
// ExecStart, ExecStartEx and EnvironmentFiles.
type (
	execEntry struct {
		Path                           string
		Argv                           []string
		IgnoreFailure                  bool
		StartRT, StartMono, EndRT, End uint64
		PID                            uint32
		Code, Status                   int32
	}
	execExEntry struct {
		Path                           string
		Argv                           []string
		Flags                          []string
		StartRT, StartMono, EndRT, End uint64
		PID                            uint32
		Code, Status                   int32
	}
	envFileEntry struct {
		Path     string
		Optional bool
	}
)

// unitProps are a unit's properties by interface (the last part of its
// name: "Unit", "Service").
type unitProps map[string]map[string]dbus.Variant

// propsOf returns the properties systemd sends for u.
func propsOf(u *Unit) unitProps {
	ex := func(cmds ...ExecCommand) []execExEntry {
		out := []execExEntry{}
		for _, c := range cmds {
			var flags []string
			if c.IgnoreFailure {
				flags = append(flags, "ignore-failure")
			}
			if c.NoEnvExpand {
				flags = append(flags, "no-env-expand")
			}
			if c.ViaShell {
				flags = append(flags, "via-shell")
			}
			out = append(out, execExEntry{Path: c.Path, Argv: c.Argv, Flags: flags, PID: 1})
		}
		return out
	}
	old := func(cmds ...ExecCommand) []execEntry {
		out := []execEntry{}
		for _, c := range cmds {
			out = append(out, execEntry{Path: c.Path, Argv: c.Argv, IgnoreFailure: c.IgnoreFailure})
		}
		return out
	}
	files := []envFileEntry{}
	for _, f := range u.EnvironmentFiles {
		files = append(files, envFileEntry(f))
	}
	strs := func(s []string) dbus.Variant { return dbus.MakeVariant(append([]string{}, s...)) }
	start := []ExecCommand{}
	if u.ExecStart.Path != "" {
		start = append(start, u.ExecStart)
	}
	return unitProps{
		"Unit": {
			"Id":               dbus.MakeVariant(u.Name),
			"LoadState":        dbus.MakeVariant(u.LoadState),
			"ActiveState":      dbus.MakeVariant(u.ActiveState),
			"SubState":         dbus.MakeVariant(u.SubState),
			"UnitFileState":    dbus.MakeVariant(u.UnitFileState),
			"NeedDaemonReload": dbus.MakeVariant(u.NeedDaemonReload),
			"DropInPaths":      strs(u.DropInPaths),
			"FragmentPath":     dbus.MakeVariant(u.FragmentPath),
			"Description":      dbus.MakeVariant("kubelet: The Kubernetes Node Agent"),
		},
		"Service": {
			"MainPID":          dbus.MakeVariant(u.MainPID),
			"Environment":      strs(u.Environment),
			"UnsetEnvironment": strs(u.UnsetEnvironment),
			"PassEnvironment":  strs(u.PassEnvironment),
			"EnvironmentFiles": dbus.MakeVariant(files),
			"ExecStart":        dbus.MakeVariant(old(start...)),
			"ExecStartEx":      dbus.MakeVariant(ex(start...)),
			"ExecStartPre":     dbus.MakeVariant(old(u.ExecStartPre...)),
			"ExecStartPreEx":   dbus.MakeVariant(ex(u.ExecStartPre...)),
			"Type":             dbus.MakeVariant("simple"),
		},
	}
}

// fakeUnitProps answers, for Inspect and ManagerEnvironment, GetAll and
// Get of org.freedesktop.DBus.Properties on the units' objects, and Get of
// the manager's Environment, as systemd does; a unit it does not serve is
// "not-found".
type fakeUnitProps struct {
	mu    sync.Mutex
	units map[string]unitProps
	env   []string // the manager's Environment
}

// newFakeUnitProps takes systemd's name on the bus at address and serves
// units.
func newFakeUnitProps(t *testing.T, address string, units map[string]unitProps, env []string) *fakeUnitProps {
	t.Helper()
	conn, err := dbus.Connect(address)
	if err != nil {
		t.Fatalf("fake systemd: connect to %s: %v", address, err)
	}
	t.Cleanup(func() { conn.Close() })
	f := &fakeUnitProps{units: units, env: env}
	if err := conn.ExportSubtree(fakePropsUnits{f}, "/org/freedesktop/systemd1/unit", "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	if err := conn.Export(fakePropsManager{f}, "/org/freedesktop/systemd1", "org.freedesktop.DBus.Properties"); err != nil {
		t.Fatal(err)
	}
	reply, err := conn.RequestName("org.freedesktop.systemd1", dbus.NameFlagDoNotQueue)
	if err != nil || reply != dbus.RequestNameReplyPrimaryOwner {
		t.Fatalf("fake systemd: request name: %v, %v", reply, err)
	}
	return f
}

func (f *fakeUnitProps) set(change func(units map[string]unitProps)) {
	f.mu.Lock()
	defer f.mu.Unlock()
	change(f.units)
}

// props returns the properties of iface on the unit at path.
func (f *fakeUnitProps) props(path dbus.ObjectPath, iface string) (map[string]dbus.Variant, *dbus.Error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for name, u := range f.units {
		if path == dbus.ObjectPath("/org/freedesktop/systemd1/unit/"+sdbus.PathBusEscape(name)) {
			if p, ok := u[strings.TrimPrefix(iface, "org.freedesktop.systemd1.")]; ok {
				return maps.Clone(p), nil // godbus reads it after the lock is released
			}
			e := dbus.MakeUnknownInterfaceError(iface)
			return nil, &e
		}
	}
	if iface != "org.freedesktop.systemd1.Unit" {
		e := dbus.MakeUnknownInterfaceError(iface)
		return nil, &e
	}
	// systemd loads a unit without a file as "not-found".
	return map[string]dbus.Variant{
		"Id": dbus.MakeVariant(string(path)), "LoadState": dbus.MakeVariant("not-found"),
		"ActiveState": dbus.MakeVariant("inactive"), "SubState": dbus.MakeVariant("dead"),
		"UnitFileState": dbus.MakeVariant(""), "NeedDaemonReload": dbus.MakeVariant(false),
		"DropInPaths": dbus.MakeVariant([]string{}), "FragmentPath": dbus.MakeVariant(""),
	}, nil
}

type fakePropsUnits struct{ f *fakeUnitProps }

func (o fakePropsUnits) GetAll(msg dbus.Message, iface string) (map[string]dbus.Variant, *dbus.Error) {
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	return o.f.props(path, iface)
}

func (o fakePropsUnits) Get(msg dbus.Message, iface, property string) (dbus.Variant, *dbus.Error) {
	path, _ := msg.Headers[dbus.FieldPath].Value().(dbus.ObjectPath)
	p, err := o.f.props(path, iface)
	if err != nil {
		return dbus.Variant{}, err
	}
	v, ok := p[property]
	if !ok {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{"Unknown property " + property})
	}
	return v, nil
}

type fakePropsManager struct{ f *fakeUnitProps }

func (o fakePropsManager) Get(iface, property string) (dbus.Variant, *dbus.Error) {
	if iface != "org.freedesktop.systemd1.Manager" || property != "Environment" {
		return dbus.Variant{}, dbus.NewError("org.freedesktop.DBus.Error.UnknownProperty", []any{"Unknown property " + property})
	}
	o.f.mu.Lock()
	defer o.f.mu.Unlock()
	return dbus.MakeVariant(append([]string{}, o.f.env...)), nil
}

func TestInspect(t *testing.T) {
	tests := []struct {
		name       string
		change     func(p unitProps)
		want       func(u *Unit) // from kubeadmUnit
		wantErr    string        // "" means success
		noSuchUnit bool
	}{
		{name: "kubeadm unit with the preflight drop-in"},
		{
			name: "flags of ExecStartEx",
			change: func(p unitProps) {
				p["Service"]["ExecStartEx"] = dbus.MakeVariant([]execExEntry{{Path: "/usr/bin/kubelet", Argv: []string{"/usr/bin/kubelet"}, Flags: []string{"no-env-expand", "privileged"}}})
				p["Service"]["ExecStartPreEx"] = dbus.MakeVariant([]execExEntry{
					{Path: "/bin/true", Argv: []string{"/bin/true"}, Flags: []string{"ignore-failure"}},
					{Path: "/bin/sh", Argv: []string{"sh", "echo"}, Flags: []string{"via-shell"}},
				})
			},
			want: func(u *Unit) {
				u.ExecStart = ExecCommand{Path: "/usr/bin/kubelet", Argv: []string{"/usr/bin/kubelet"}, NoEnvExpand: true}
				u.ExecStartPre = []ExecCommand{
					{Path: "/bin/true", Argv: []string{"/bin/true"}, IgnoreFailure: true},
					{Path: "/bin/sh", Argv: []string{"sh", "echo"}, ViaShell: true},
				}
			},
		},
		{
			name: "systemd before v243 without ExecStartEx",
			change: func(p unitProps) {
				delete(p["Service"], "ExecStartEx")
				delete(p["Service"], "ExecStartPreEx")
				p["Service"]["ExecStartPre"] = dbus.MakeVariant([]execEntry{{Path: "/bin/true", Argv: []string{"/bin/true"}, IgnoreFailure: true}})
			},
			want: func(u *Unit) {
				u.ExecStartPre = []ExecCommand{{Path: "/bin/true", Argv: []string{"/bin/true"}, IgnoreFailure: true}}
			},
		},
		{
			name: "the last of several ExecStart of a oneshot service",
			change: func(p unitProps) {
				p["Service"]["ExecStartEx"] = dbus.MakeVariant([]execExEntry{{Path: "/bin/a", Argv: []string{"a"}}, {Path: "/bin/b", Argv: []string{"b"}}})
			},
			want: func(u *Unit) { u.ExecStart = ExecCommand{Path: "/bin/b", Argv: []string{"b"}} },
		},
		{
			name: "masked after start",
			change: func(p unitProps) {
				p["Unit"] = propsOf(&Unit{Name: "kubelet.service", LoadState: "masked", ActiveState: "inactive", SubState: "dead", UnitFileState: "masked", FragmentPath: "/etc/systemd/system/kubelet.service"})["Unit"]
				p["Service"] = propsOf(&Unit{})["Service"]
			},
			want: func(u *Unit) {
				*u = Unit{Name: "kubelet.service", LoadState: "masked", ActiveState: "inactive", SubState: "dead", UnitFileState: "masked", FragmentPath: "/etc/systemd/system/kubelet.service"}
			},
		},
		{
			name:       "gone after start",
			noSuchUnit: true,
			wantErr:    "kubeletctl: inspect kubelet.service: no such unit",
		},
		{
			name:    "a property of another type",
			change:  func(p unitProps) { p["Service"]["MainPID"] = dbus.MakeVariant(int32(4242)) },
			wantErr: "kubeletctl: inspect kubelet.service: property MainPID of org.freedesktop.systemd1.Service is int32, want u",
		},
		{
			name:    "a property missing",
			change:  func(p unitProps) { delete(p["Unit"], "NeedDaemonReload") },
			wantErr: "kubeletctl: inspect kubelet.service: systemd did not send property NeedDaemonReload of org.freedesktop.systemd1.Unit",
		},
		{
			name: "a command of another type",
			change: func(p unitProps) {
				p["Service"]["ExecStartEx"] = dbus.MakeVariant([]struct{ Path, Argv string }{{"/bin/a", "a"}})
			},
			wantErr: `property ExecStartEx of org.freedesktop.systemd1.Service has an element [/bin/a a], want a(sasasttttuii)`,
		},
		{
			name: "environment files of another type",
			change: func(p unitProps) {
				p["Service"]["EnvironmentFiles"] = dbus.MakeVariant([]string{"/etc/default/kubelet"})
			},
			wantErr: "property EnvironmentFiles of org.freedesktop.systemd1.Service is []string, want a(sb)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			bus := startBus(t)
			fake := newFakeUnitProps(t, bus.address, map[string]unitProps{"kubelet.service": propsOf(kubeadmUnit())}, nil)
			s, err := NewSystemd(t.Context(), SystemdOptions{Unit: "kubelet", BusAddress: bus.address})
			if err != nil {
				t.Fatalf("NewSystemd: %v", err)
			}
			defer s.Close()
			fake.set(func(units map[string]unitProps) {
				if tt.noSuchUnit {
					delete(units, "kubelet.service")
				}
				if tt.change != nil {
					tt.change(units["kubelet.service"])
				}
			})
			got, err := s.Inspect(t.Context())
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Inspect error = %v, want one containing %q", err, tt.wantErr)
				}
				if errors.Is(err, ErrNoSuchUnit) != tt.noSuchUnit {
					t.Errorf("errors.Is(%q, ErrNoSuchUnit) = %v, want %v", err, !tt.noSuchUnit, tt.noSuchUnit)
				}
				return
			}
			if err != nil {
				t.Fatalf("Inspect: %v", err)
			}
			want := kubeadmUnit()
			if tt.want != nil {
				tt.want(want)
			}
			if diff := cmp.Diff(want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("unexpected unit (-want +got):\n%s", diff)
			}
		})
	}
}

// TestInspectCommandLine reads the unit and the manager's environment over
// D-Bus and computes the kubelet's command line from them.
func TestInspectCommandLine(t *testing.T) {
	bus := startBus(t)
	newFakeUnitProps(t, bus.address, map[string]unitProps{"kubelet.service": propsOf(kubeadmUnit())}, []string{"LANG=C.UTF-8", "PATH=/usr/bin", "KUBELET_EXTRA_ARGS=--v=3"})
	s, err := NewSystemd(t.Context(), SystemdOptions{BusAddress: bus.address})
	if err != nil {
		t.Fatalf("NewSystemd: %v", err)
	}
	defer s.Close()
	u, err := s.Inspect(t.Context())
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	env, err := s.ManagerEnvironment(t.Context())
	if err != nil {
		t.Fatalf("ManagerEnvironment: %v", err)
	}
	if diff := cmp.Diff(map[string]string{"LANG": "C.UTF-8", "PATH": "/usr/bin", "KUBELET_EXTRA_ARGS": "--v=3"}, env); diff != "" {
		t.Errorf("unexpected manager environment (-want +got):\n%s", diff)
	}
	got, err := u.CommandLine(fakeFiles(map[string]string{"/var/lib/kubelet/kubeadm-flags.env": kubeadmFlags}), env)
	if err != nil {
		t.Fatalf("CommandLine: %v", err)
	}
	if diff := cmp.Diff(append(append([]string(nil), kubeadmCmdline...), "--v=3"), got); diff != "" {
		t.Errorf("unexpected command line (-want +got):\n%s", diff)
	}
	if _, ok := u.Preflight(); !ok {
		t.Error("no preflight in the unit read over D-Bus")
	}
}

// TestInspectSystemBus inspects systemd-journald.service on the host's
// systemd, when there is one, and checks that the command line computed
// for it is the one it runs with.
func TestInspectSystemBus(t *testing.T) {
	if _, err := os.Stat("/run/systemd/system"); err != nil {
		t.Skipf("SKIPPED: systemd is not running here (%v)", err)
	}
	s, err := NewSystemd(t.Context(), SystemdOptions{Unit: "systemd-journald.service"})
	if err != nil {
		t.Skipf("SKIPPED: no systemd on the system bus: %v", err)
	}
	defer s.Close()
	u, err := s.Inspect(t.Context())
	if err != nil {
		t.Fatalf("Inspect: %v", err)
	}
	t.Logf("%+v", *u)
	if u.Name != "systemd-journald.service" || u.LoadState != "loaded" || u.ExecStart.Path == "" || u.FragmentPath == "" {
		t.Errorf("unexpected unit %+v", *u)
	}
	env, err := s.ManagerEnvironment(t.Context())
	if err != nil {
		t.Fatalf("ManagerEnvironment: %v", err)
	}
	got, err := u.CommandLine(os.ReadFile, env)
	if err != nil {
		t.Fatalf("CommandLine: %v", err)
	}
	if u.MainPID == 0 {
		return
	}
	b, err := os.ReadFile("/proc/" + strconv.FormatUint(uint64(u.MainPID), 10) + "/cmdline")
	if err != nil {
		t.Skipf("SKIPPED: cannot read the main process's command line: %v", err)
	}
	want := strings.Split(strings.TrimSuffix(string(b), "\x00"), "\x00")
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("command line of %s (-/proc/%d/cmdline +CommandLine):\n%s", u.Name, u.MainPID, diff)
	}
}
