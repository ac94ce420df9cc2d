package kubeletctl

import (
	"errors"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
)

// kubeadmFlags is what kubeadm init/join write to
// /var/lib/kubelet/kubeadm-flags.env.
const kubeadmFlags = `KUBELET_KUBEADM_ARGS="--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10"
`

const kubeadmArgs = "--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock --pod-infra-container-image=registry.k8s.io/pause:3.10"

// The expectations below were checked against systemd 252 running the
// files (a user manager started by hand), except where a case says that
// systemd 252 reads it differently.
func TestParseEnvironmentFile(t *testing.T) {
	tests := []struct {
		name      string
		in        string
		want      map[string]string
		wantOrder []string
		wantErr   string // "" means success
		versioned bool   // the error matches ErrVersionDependent
	}{
		{
			name:      "kubeadm flags",
			in:        kubeadmFlags,
			want:      map[string]string{"KUBELET_KUBEADM_ARGS": kubeadmArgs},
			wantOrder: []string{"KUBELET_KUBEADM_ARGS"},
		},
		{
			name:      "an empty KUBELET_EXTRA_ARGS, as kubeadm's packages ship it",
			in:        "KUBELET_EXTRA_ARGS=\n",
			want:      map[string]string{"KUBELET_EXTRA_ARGS": ""},
			wantOrder: []string{"KUBELET_EXTRA_ARGS"},
		},
		{
			name: "empty file",
			want: map[string]string{},
		},
		{
			name:      "comments and blank lines",
			in:        "# a comment\n; another\n\n   # indented\n\t\nA=1\n",
			want:      map[string]string{"A": "1"},
			wantOrder: []string{"A"},
		},
		{
			name:      "no comments after a value",
			in:        "A=b # c\n",
			want:      map[string]string{"A": "b # c"},
			wantOrder: []string{"A"},
		},
		{
			name:      "whitespace around key and value",
			in:        "  A \t=  b  c \t\n",
			want:      map[string]string{"A": "b  c"},
			wantOrder: []string{"A"},
		},
		{
			name:      "export is no keyword: its assignment is dropped",
			in:        "export KUBELET_EXTRA_ARGS=--v=2\nB=export\n",
			want:      map[string]string{"B": "export"},
			wantOrder: []string{"B"},
		},
		{
			name:      "invalid names are dropped",
			in:        "1A=x\nA-B=y\nA.B=z\n=v\n_ok1=1\n",
			want:      map[string]string{"_ok1": "1"},
			wantOrder: []string{"_ok1"},
		},
		{
			name:      "lines without = are ignored",
			in:        "JUSTAKEY\nA=1\nTRAILING",
			want:      map[string]string{"A": "1"},
			wantOrder: []string{"A"},
		},
		{
			name:      "the last assignment wins, the first sets the order",
			in:        "A=1\nB=2\nA=3\n",
			want:      map[string]string{"A": "3", "B": "2"},
			wantOrder: []string{"A", "B"},
		},
		{
			name:      "empty values",
			in:        "A=\nB=\"\"\nC=''\nD=   \n",
			want:      map[string]string{"A": "", "B": "", "C": "", "D": ""},
			wantOrder: []string{"A", "B", "C", "D"},
		},
		{
			name:      "double quotes keep whitespace and take \\\"",
			in:        `A="  say \"hi\"  "` + "\n",
			want:      map[string]string{"A": `  say "hi"  `},
			wantOrder: []string{"A"},
		},
		{
			name:      "double quotes keep other backslashes",
			in:        `A="a\nb\tc\d"` + "\n",
			want:      map[string]string{"A": `a\nb\tc\d`},
			wantOrder: []string{"A"},
		},
		{
			name:      "single quotes are literal",
			in:        `A='x \" $y \ "z'` + "\n",
			want:      map[string]string{"A": `x \" $y \ "z`},
			wantOrder: []string{"A"},
		},
		{
			name:      "quoted parts are concatenated",
			in:        `A="x" 'y'z` + "\n",
			want:      map[string]string{"A": "xyz"},
			wantOrder: []string{"A"},
		},
		{
			name:      "quotes inside an unquoted value are literal",
			in:        `A=--a="b c" 'd'` + "\n",
			want:      map[string]string{"A": `--a="b c" 'd'`},
			wantOrder: []string{"A"},
		},
		{
			name:      "backslashes in an unquoted value",
			in:        `A=a\ b\\c\"d\$e\x` + "\n",
			want:      map[string]string{"A": `a b\c"d$ex`},
			wantOrder: []string{"A"},
		},
		{
			name:      "an escaped trailing space is kept",
			in:        "A=a\\ \nB=b \\  \n",
			want:      map[string]string{"A": "a ", "B": "b  "},
			wantOrder: []string{"A", "B"},
		},
		{
			name:      "continuation lines",
			in:        "A=--a \\\n  --b\nB=\"--c \\\n--d\"\n",
			want:      map[string]string{"A": "--a   --b", "B": "--c --d"},
			wantOrder: []string{"A", "B"},
		},
		{
			name:      "a double-quoted value spans lines",
			in:        "A=\"--a\n  --b\"\nB=1\n",
			want:      map[string]string{"A": "--a\n  --b", "B": "1"},
			wantOrder: []string{"A", "B"},
		},
		{
			name:      "an open quote ends at the end of the file",
			in:        `A="abc`,
			want:      map[string]string{"A": "abc"},
			wantOrder: []string{"A"},
		},
		{
			name:      "no newline at the end",
			in:        "A=1\nB=two words  ",
			want:      map[string]string{"A": "1", "B": "two words"},
			wantOrder: []string{"A", "B"},
		},
		{
			name:      "CRLF line ends",
			in:        "A=1\r\nB=\"2\"\r\n# c\r\nC=3\r\n",
			want:      map[string]string{"A": "1", "B": "2", "C": "3"},
			wantOrder: []string{"A", "B", "C"},
		},
		{
			name:    "a NUL byte",
			in:      "A=1\nB=2\x00\n",
			wantErr: "line 2: a NUL byte (systemd refuses the file)",
		},
		{
			name:      "tabs in a value",
			in:        "A=\"a\tb\"\n",
			want:      map[string]string{"A": "a\tb"},
			wantOrder: []string{"A"},
		},
		{
			name:      "a comment ending in a backslash before a blank line",
			in:        "# c \\\n\nA=1\n",
			want:      map[string]string{"A": "1"},
			wantOrder: []string{"A"},
		},
		{
			name:    "invalid UTF-8 in a value",
			in:      "A=1\nB=\xff\n",
			wantErr: "line 2: invalid UTF-8 in the value of B (systemd refuses the file)",
		},
		{
			name:    "invalid UTF-8 in a key",
			in:      "\xffA=1\n",
			wantErr: "line 1: invalid UTF-8 in key",
		},
		// systemd 252 reads the next line as a comment.
		{
			name:      "a comment ending in a backslash before an assignment",
			in:        "A=1\n# c \\\nB=2\n",
			wantErr:   "line 3: the line before is a comment ending in a backslash",
			versioned: true,
		},
		{
			name:      "\\\\ in double quotes",
			in:        `A="C:\\dir"` + "\n",
			wantErr:   `line 1: the double-quoted value of A has a backslash escape systemd before v247 keeps`,
			versioned: true,
		},
		{
			name:      "\\$ in double quotes",
			in:        "A=1\nB=\"\\$HOME\"\n",
			wantErr:   "line 2: the double-quoted value of B",
			versioned: true,
		},
		{
			name:      "a control character",
			in:        "A=\"a\x1bb\"\n",
			wantErr:   "line 1: the value of A has control characters",
			versioned: true,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, order, err := ParseEnvironmentFile(strings.NewReader(tt.in))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("ParseEnvironmentFile error = %v, want one containing %q", err, tt.wantErr)
				}
				if !strings.HasPrefix(err.Error(), "kubeletctl: environment file: ") {
					t.Errorf("error %q does not name the package", err)
				}
				if got := errors.Is(err, ErrVersionDependent); got != tt.versioned {
					t.Errorf("errors.Is(%q, ErrVersionDependent) = %v, want %v", err, got, tt.versioned)
				}
				return
			}
			if err != nil {
				t.Fatalf("ParseEnvironmentFile: %v", err)
			}
			if diff := cmp.Diff(tt.want, got); diff != "" {
				t.Errorf("unexpected variables (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tt.wantOrder, order, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("unexpected order (-want +got):\n%s", diff)
			}
		})
	}
}

func TestParseEnvironmentFileReadError(t *testing.T) {
	_, _, err := ParseEnvironmentFile(iotest.ErrReader(errors.New("boom")))
	if err == nil || !strings.Contains(err.Error(), "kubeletctl: read environment file: boom") {
		t.Errorf("ParseEnvironmentFile error = %v, want the read error", err)
	}
	_, _, err = ParseEnvironmentFile(strings.NewReader("A=" + strings.Repeat("x", maxEnvFileSize)))
	if err == nil || !strings.Contains(err.Error(), "larger than") {
		t.Errorf("ParseEnvironmentFile of a huge file: error = %v, want one saying it is too large", err)
	}
}

// envFunc looks variables up in m.
func envFunc(m map[string]string) func(string) (string, bool) {
	return func(k string) (string, bool) {
		v, ok := m[k]
		return v, ok
	}
}

// The expectations below were checked against systemd 252 running the
// commands.
func TestExpandExecArgs(t *testing.T) {
	kubeadmEnv := map[string]string{
		"KUBELET_KUBECONFIG_ARGS": "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf",
		"KUBELET_CONFIG_ARGS":     "--config=/var/lib/kubelet/config.yaml",
		"KUBELET_KUBEADM_ARGS":    kubeadmArgs,
	}
	env := map[string]string{
		"A":      "a",
		"EMPTY":  "",
		"BLANK":  " \t\n ",
		"WORDS":  "  one\ttwo\n three  ",
		"QUOTED": `--a="b c" 'd e' f\ g "" h"i"j`,
		"OPEN":   `x "y z`,
		"SLASH":  `a\`,
		"DOLLAR": "$A",
		"BIN":    "/usr/bin/kubelet",
	}
	tests := []struct {
		name string
		env  map[string]string
		argv []string
		want []string
	}{
		{
			name: "kubeadm's ExecStart, KUBELET_EXTRA_ARGS unset",
			env:  kubeadmEnv,
			argv: strings.Fields("/usr/bin/kubelet $KUBELET_KUBECONFIG_ARGS $KUBELET_CONFIG_ARGS $KUBELET_KUBEADM_ARGS $KUBELET_EXTRA_ARGS"),
			want: []string{
				"/usr/bin/kubelet",
				"--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf",
				"--kubeconfig=/etc/kubernetes/kubelet.conf",
				"--config=/var/lib/kubelet/config.yaml",
				"--container-runtime-endpoint=unix:///var/run/containerd/containerd.sock",
				"--pod-infra-container-image=registry.k8s.io/pause:3.10",
			},
		},
		{
			name: "the preflight drop-in's ExecStartPre",
			env:  map[string]string{"HOTPLUGD_PREFLIGHT_ARGS": "", "KUBELET_CONFIG_ARGS": "--config=/var/lib/kubelet/config.yaml"},
			argv: strings.Fields("/usr/local/bin/hotplugd preflight $HOTPLUGD_PREFLIGHT_ARGS -- $KUBELET_CONFIG_ARGS $KUBELET_EXTRA_ARGS"),
			want: []string{"/usr/local/bin/hotplugd", "preflight", "--", "--config=/var/lib/kubelet/config.yaml"},
		},
		{
			name: "$NAME words are split at whitespace",
			env:  env,
			argv: []string{"$WORDS", "$A"},
			want: []string{"one", "two", "three", "a"},
		},
		{
			name: "$NAME words unset, empty or blank disappear",
			env:  env,
			argv: []string{"x", "$UNSET", "$EMPTY", "$BLANK", "y"},
			want: []string{"x", "y"},
		},
		{
			name: "$NAME words split with quotes and backslashes",
			env:  env,
			argv: []string{"$QUOTED"},
			want: []string{"--a=b c", "d e", "f g", "", "hij"},
		},
		{
			name: "an open quote or a trailing backslash in a split value",
			env:  env,
			argv: []string{"$OPEN", "$SLASH"},
			want: []string{"x", "y z", "a"},
		},
		{
			name: "values are not expanded again",
			env:  env,
			argv: []string{"$DOLLAR", "${DOLLAR}"},
			want: []string{"$A", "$A"},
		},
		{
			name: "${NAME} within a word is not split",
			env:  env,
			argv: []string{"--x=${WORDS}", "${A}${A}-${UNSET}-"},
			want: []string{"--x=  one\ttwo\n three  ", "aa--"},
		},
		{
			name: "${NAME} unset or empty leaves an empty word",
			env:  env,
			argv: []string{"${UNSET}", "${EMPTY}"},
			want: []string{"", ""},
		},
		{
			name: "argv[0] is expanded too",
			env:  env,
			argv: []string{"${BIN}", "$A"},
			want: []string{"/usr/bin/kubelet", "a"},
		},
		{
			name: "$$ is a $",
			env:  env,
			argv: []string{"$$", "$$A", "a$$b", "$${A}", "$$$"},
			want: []string{"$", "$A", "a$b", "${A}", "$$"},
		},
		{
			name: "other dollars are literal",
			env:  env,
			argv: []string{"a$A", "a$", "${A:-x}", "${A", "x${A}${"},
			want: []string{"a$A", "a$", "${A:-x}", "${A", "xa${"},
		},
		{
			name: "$ words that are no variable name disappear",
			env:  env,
			argv: []string{"$", "$A/bin", "$1", "x"},
			want: []string{"x"},
		},
		{
			name: "${} with an invalid name is empty",
			env:  env,
			argv: []string{"<${1A}>", "<${}>", "<${A-B}>"},
			want: []string{"<>", "<>", "<>"},
		},
		{
			name: "nothing to expand",
			env:  env,
			argv: []string{"/bin/true", "--flag=value", ""},
			want: []string{"/bin/true", "--flag=value", ""},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got := ExpandExecArgs(tt.argv, envFunc(tt.env))
			if diff := cmp.Diff(tt.want, got, cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("ExpandExecArgs(%q) unexpected result (-want +got):\n%s", tt.argv, diff)
			}
		})
	}
}
