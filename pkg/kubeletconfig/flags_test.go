package kubeletconfig

import (
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	"k8s.io/utils/ptr"
)

func TestParseArgs(t *testing.T) {
	tests := []struct {
		name    string
		args    string // split on spaces
		want    cmdFlags
		wantErr string
	}{
		{name: "nothing", args: ""},
		{name: "--flag=value", args: "--config=/a.yaml", want: cmdFlags{config: "/a.yaml"}},
		{name: "--flag value", args: "--config /a.yaml", want: cmdFlags{config: "/a.yaml"}},
		{name: "Go-style -flag value", args: "-config /a.yaml", want: cmdFlags{config: "/a.yaml"}},
		{name: "Go-style -flag=value", args: "-config=/a.yaml", want: cmdFlags{config: "/a.yaml"}},
		{name: "underscores are dashes", args: "--root_dir /r --config_dir=/d", want: cmdFlags{rootDir: "/r", configDir: "/d"}},
		{name: "last one wins", args: "--config /a --config=/b", want: cmdFlags{config: "/b"}},
		{name: "empty value", args: "--config= --root-dir=", want: cmdFlags{}},
		{
			name: "unknown flag takes the next word as its value",
			args: "--from-the-future value --config /a",
			want: cmdFlags{config: "/a"},
		},
		{
			name: "unknown flag with =value",
			args: "--from-the-future=/b --config /a",
			want: cmdFlags{config: "/a"},
		},
		{
			name: "unknown flag before a flag takes no value",
			args: "--from-the-future --config /a --also-unknown",
			want: cmdFlags{config: "/a"},
		},
		{
			name: "known value flags take the next word whatever it is",
			args: "--provider-id --config=/wrong --oom-score-adj -999 --config /right --node-labels=a=b,c=d",
			want: cmdFlags{config: "/right"},
		},
		{
			name: "kubeadm flags",
			args: "--bootstrap-kubeconfig=/etc/kubernetes/bootstrap-kubelet.conf --kubeconfig=/etc/kubernetes/kubelet.conf " +
				"--config=/var/lib/kubelet/config.yaml --container-runtime-endpoint=unix:///var/run/containerd/containerd.sock " +
				"--pod-infra-container-image=registry.k8s.io/pause:3.10 --node-ip 10.0.0.5 --hostname-override node-1",
			want: cmdFlags{config: "/var/lib/kubelet/config.yaml"},
		},
		{name: "boolean before a flag", args: "--fail-swap-on --config /a", want: cmdFlags{config: "/a"}},
		{name: "boolean =false", args: "--fail-swap-on=false --register-node=true --config /a", want: cmdFlags{config: "/a"}},
		{name: "boolean at the end", args: "--config /a --rotate-certificates", want: cmdFlags{config: "/a"}},
		{name: "boolean of an older kubelet", args: "--logtostderr --config /a --keep-terminated-pod-volumes", want: cmdFlags{config: "/a"}},
		{name: "boolean with a bad value", args: "--fail-swap-on=maybe", wantErr: `invalid argument "maybe" for --fail-swap-on`},
		{
			name:    "boolean followed by a word: the kubelet refuses it",
			args:    "--fail-swap-on false --config /a",
			wantErr: `unexpected argument "false"`,
		},
		{name: "-v N", args: "-v 4 --config /a", want: cmdFlags{config: "/a"}},
		{name: "-v=N", args: "-v=4 --config /a", want: cmdFlags{config: "/a"}},
		{name: "-vN", args: "-v4 --config /a", want: cmdFlags{config: "/a"}},
		{name: "--v=N", args: "--v=4 --vmodule=a=1 --config /a", want: cmdFlags{config: "/a"}},
		{name: "-h", args: "-h --config /a", want: cmdFlags{config: "/a"}},
		{name: "--version takes an optional value", args: "--version --config /a --version=raw", want: cmdFlags{config: "/a"}},
		{name: "-- at the end", args: "--config /a --", want: cmdFlags{config: "/a"}},
		{name: "argument after --", args: "--config /a -- extra", wantErr: `unexpected argument "extra" after "--"`},
		{name: "positional argument", args: "kubelet --config /a", wantErr: `unexpected argument "kubelet"`},
		{name: "lone dash", args: "-", wantErr: `unexpected argument "-"`},
		{name: "value missing at the end", args: "--config", wantErr: "flag needs an argument: --config"},
		{name: "bad syntax ---", args: "---config /a", wantErr: "bad flag syntax: ---config"},
		{name: "bad syntax --=", args: "--=/a", wantErr: "bad flag syntax: --=/a"},
		{name: "ignore eviction for allocatable", args: "--experimental-allocatable-ignore-eviction", want: cmdFlags{ignoreEviction: true}},
		{name: "ignore eviction =false", args: "--experimental-allocatable-ignore-eviction=false", want: cmdFlags{}},
		{
			name: "configuration flags are kept in order, both forms",
			args: "--cpu-manager-policy static --cpu-manager-policy-options=full-pcpus-only=true --reserved-cpus=0-1 " +
				"--memory-manager-policy Static --reserved-memory 0:memory=1Gi --topology-manager-policy=single-numa-node " +
				"--topology-manager-scope pod --topology-manager-policy-options prefer-closest-numa-nodes=true " +
				"--kube-reserved cpu=100m --system-reserved=memory=1Gi --eviction-hard memory.available<1Gi " +
				"--feature-gates=A=true --healthz-bind-address 0.0.0.0 --healthz-port=10300 --eviction-soft memory.available<2Gi",
			want: cmdFlags{overrides: []argFlag{
				{"cpu-manager-policy", "static"}, {"cpu-manager-policy-options", "full-pcpus-only=true"},
				{"reserved-cpus", "0-1"}, {"memory-manager-policy", "Static"}, {"reserved-memory", "0:memory=1Gi"},
				{"topology-manager-policy", "single-numa-node"}, {"topology-manager-scope", "pod"},
				{"topology-manager-policy-options", "prefer-closest-numa-nodes=true"},
				{"kube-reserved", "cpu=100m"}, {"system-reserved", "memory=1Gi"},
				{"eviction-hard", "memory.available<1Gi"}, {"feature-gates", "A=true"},
				{"healthz-bind-address", "0.0.0.0"}, {"healthz-port", "10300"},
			}},
		},
		{
			name: "single-dash configuration flags",
			args: "-feature-gates A=false -reserved_cpus=3",
			want: cmdFlags{overrides: []argFlag{{"feature-gates", "A=false"}, {"reserved-cpus", "3"}}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := parseArgs(strings.Fields(tt.args))
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("parseArgs() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("parseArgs() error: %v", err)
			}
			if diff := cmp.Diff(&tt.want, got, cmp.AllowUnexported(cmdFlags{}, argFlag{}), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("unexpected flags (-want +got):\n%s", diff)
			}
		})
	}
}

// quantityEqual compares quantities by value, as resource.Quantity caches
// its string form.
var quantityEqual = cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })

func TestApplyFlags(t *testing.T) {
	const head = "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n"
	fromFile := func(body string) func() *kubeletv1beta1.KubeletConfiguration {
		return func() *kubeletv1beta1.KubeletConfiguration {
			c, err := Parse([]byte(head + body))
			if err != nil {
				panic(err)
			}
			return c
		}
	}
	mem := func(s string) resource.Quantity { return resource.MustParse(s) }
	tests := []struct {
		name    string
		base    func() *kubeletv1beta1.KubeletConfiguration // Default when nil
		args    []string
		want    func(c *kubeletv1beta1.KubeletConfiguration) // edits the base into the expected result
		wantErr string
	}{
		{
			name: "string flags replace the file's values",
			base: fromFile("cpuManagerPolicy: none\nmemoryManagerPolicy: None\ntopologyManagerPolicy: none\nreservedSystemCPUs: \"0\"\n"),
			args: []string{
				"--cpu-manager-policy=static", "--memory-manager-policy", "Static", "--topology-manager-policy=restricted",
				"--topology-manager-scope", "pod", "--reserved-cpus", "0-1,8-9",
			},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.CPUManagerPolicy, c.MemoryManagerPolicy, c.TopologyManagerPolicy = "static", "Static", "restricted"
				c.TopologyManagerScope, c.ReservedSystemCPUs = "pod", "0-1,8-9"
			},
		},
		{
			name: "an empty string flag empties the field: nothing is defaulted after the flags",
			args: []string{"--cpu-manager-policy="},
			want: func(c *kubeletv1beta1.KubeletConfiguration) { c.CPUManagerPolicy = "" },
		},
		{
			name: "cpu-manager-policy-options: one pair per use, commas stay in the value",
			base: fromFile("cpuManagerPolicyOptions:\n  distribute-cpus-across-numa: \"true\"\n"),
			args: []string{"--cpu-manager-policy-options", "full-pcpus-only=true", "--cpu-manager-policy-options=a=b,c=d"},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.CPUManagerPolicyOptions = map[string]string{"full-pcpus-only": "true", "a": "b,c=d"}
			},
		},
		{
			name:    "cpu-manager-policy-options without =",
			args:    []string{"--cpu-manager-policy-options="},
			wantErr: "malformed pair, expect string=string",
		},
		{
			name: "kube-reserved replaces the file's whole map",
			base: fromFile("kubeReserved:\n  cpu: \"1\"\n  memory: 1Gi\n"),
			args: []string{"--kube-reserved", "memory=2Gi"},
			want: func(c *kubeletv1beta1.KubeletConfiguration) { c.KubeReserved = map[string]string{"memory": "2Gi"} },
		},
		{
			name: "repeated system-reserved adds up, spaces trimmed",
			base: fromFile("systemReserved:\n  pid: \"100\"\n"),
			args: []string{"--system-reserved=cpu=500m, memory = 1Gi,", "--system-reserved", "ephemeral-storage=1Gi"},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.SystemReserved = map[string]string{"cpu": "500m", "memory": "1Gi", "ephemeral-storage": "1Gi"}
			},
		},
		{
			name: "an empty kube-reserved clears the file's reservations",
			base: fromFile("kubeReserved:\n  cpu: \"1\"\n"),
			args: []string{"--kube-reserved="},
			want: func(c *kubeletv1beta1.KubeletConfiguration) { c.KubeReserved = map[string]string{} },
		},
		{name: "malformed kube-reserved", args: []string{"--kube-reserved=cpu"}, wantErr: `flag --kube-reserved="cpu": malformed pair`},
		{
			name: "topology-manager-policy-options split on commas",
			args: []string{"--topology-manager-policy-options=prefer-closest-numa-nodes=true,max-allowable-numa-nodes=16"},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.TopologyManagerPolicyOptions = map[string]string{"prefer-closest-numa-nodes": "true", "max-allowable-numa-nodes": "16"}
			},
		},
		{
			name: "eviction-hard replaces the file's thresholds, merged defaults included",
			base: fromFile("mergeDefaultEvictionSettings: true\nevictionHard:\n  nodefs.available: 20%\n"),
			args: []string{"--eviction-hard=memory.available<1Gi"},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.EvictionHard = map[string]string{"memory.available": "1Gi"}
			},
		},
		{
			name: "eviction-hard on a kubelet without --config",
			args: []string{"--eviction-hard", "memory.available<500Mi,nodefs.available<10%", "--eviction-hard=imagefs.available<15%"},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.EvictionHard = map[string]string{"memory.available": "500Mi", "nodefs.available": "10%", "imagefs.available": "15%"}
			},
		},
		{
			name: "an empty eviction-hard turns every threshold off",
			base: fromFile(""),
			args: []string{"--eviction-hard="},
			want: func(c *kubeletv1beta1.KubeletConfiguration) { c.EvictionHard = map[string]string{} },
		},
		{name: "eviction-hard with =", args: []string{"--eviction-hard=memory.available=1Gi"}, wantErr: "malformed pair, expect string<string"},
		{
			name: "feature-gates win over the file's, which are kept otherwise",
			base: fromFile("featureGates:\n  A: true\n  B: true\n"),
			args: []string{"--feature-gates=B=false,C=true", "--feature-gates", "D=1"},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.FeatureGates = map[string]bool{"A": true, "B": false, "C": true, "D": true}
			},
		},
		{name: "feature-gates with a bad value", args: []string{"--feature-gates=A=maybe"}, wantErr: "invalid value of A: maybe"},
		{
			name: "healthz flags",
			base: fromFile("healthzPort: 10248\nhealthzBindAddress: 127.0.0.1\n"),
			args: []string{"--healthz-bind-address", "::1", "--healthz-port=10300"},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.HealthzBindAddress, c.HealthzPort = "::1", ptr.To[int32](10300)
			},
		},
		{
			name: "an empty healthz-bind-address changes nothing",
			args: []string{"--healthz-bind-address="},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {},
		},
		{
			name: "healthz-port 0 disables the endpoint",
			args: []string{"--healthz-port", "0"},
			want: func(c *kubeletv1beta1.KubeletConfiguration) { c.HealthzPort = ptr.To[int32](0) },
		},
		{name: "bad healthz-bind-address", args: []string{"--healthz-bind-address=localhost"}, wantErr: `"localhost" is not a valid IP address`},
		{name: "bad healthz-port", args: []string{"--healthz-port=http"}, wantErr: `flag --healthz-port="http"`},
		{
			name: "reserved-memory replaces the file's list; uses add up; ; separates NUMA nodes",
			base: fromFile("reservedMemory:\n- numaNode: 3\n  limits:\n    memory: 1Gi\n"),
			args: []string{
				"--reserved-memory", "0:memory=1Gi,hugepages-1Gi=2Gi",
				"--reserved-memory=1:memory=512Mi;2:hugepages-2Mi=64Mi",
			},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {
				c.ReservedMemory = []kubeletv1beta1.MemoryReservation{
					{NumaNode: 0, Limits: corev1.ResourceList{"memory": mem("1Gi"), "hugepages-1Gi": mem("2Gi")}},
					{NumaNode: 1, Limits: corev1.ResourceList{"memory": mem("512Mi")}},
					{NumaNode: 2, Limits: corev1.ResourceList{"hugepages-2Mi": mem("64Mi")}},
				}
			},
		},
		{
			name: "an empty reserved-memory changes nothing",
			base: fromFile("reservedMemory:\n- numaNode: 0\n  limits:\n    memory: 1Gi\n"),
			args: []string{"--reserved-memory="},
			want: func(c *kubeletv1beta1.KubeletConfiguration) {},
		},
		{
			name:    "reserved-memory after an empty one: the kubelet fails",
			args:    []string{"--reserved-memory=", "--reserved-memory=0:memory=1Gi"},
			wantErr: "no target",
		},
		{name: "reserved-memory without a node", args: []string{"--reserved-memory=memory=1Gi"}, wantErr: "incorrect format"},
		{name: "reserved-memory with two colons", args: []string{"--reserved-memory=0:1:memory=1Gi"}, wantErr: "incorrect format"},
		{name: "reserved-memory, node not a number", args: []string{"--reserved-memory=a:memory=1Gi"}, wantErr: "expected integer, got a"},
		{name: "reserved-memory of cpu", args: []string{"--reserved-memory=0:cpu=1"}, wantErr: `unknown type: "cpu"`},
		{name: "reserved-memory, bad quantity", args: []string{"--reserved-memory=0:memory=lots"}, wantErr: "failed to parse the quantity: lots"},
		{name: "reserved-memory, no =", args: []string{"--reserved-memory=0:memory"}, wantErr: "expected type=quantity"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			base := Default
			if tt.base != nil {
				base = tt.base
			}
			f, err := parseArgs(tt.args)
			if err != nil {
				t.Fatalf("parseArgs() error: %v", err)
			}
			got := base()
			err = applyFlags(got, f.overrides)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("applyFlags() error = %v, want %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("applyFlags() error: %v", err)
			}
			want := base()
			tt.want(want)
			if diff := cmp.Diff(want, got, quantityEqual); diff != "" {
				t.Errorf("unexpected configuration (-want +got):\n%s", diff)
			}
		})
	}
}

// TestFlagTablesAgree checks that no flag takes its value one way in one
// release's table and another way in another's: the parser reads every
// command line with the union of the tables, which is exact only then.
// It also checks that every flag hotplugd acts on is in every release.
func TestFlagTablesAgree(t *testing.T) {
	if len(flagTables) == 0 {
		t.Fatal("no flag tables")
	}
	for _, a := range flagTables {
		if len(a.flags) < 100 || a.release == "" {
			t.Errorf("table %q has %d flags: not generated?", a.release, len(a.flags))
		}
		for n := range configFlags {
			if _, ok := a.flags[n]; !ok {
				t.Errorf("kubelet %s has no flag --%s, which hotplugd applies", a.release, n)
			}
		}
		for _, n := range []string{"config", "config-dir", "root-dir"} {
			if a.flags[n] != valueFlag {
				t.Errorf("kubelet %s: --%s is not a flag with a value", a.release, n)
			}
		}
		for _, b := range flagTables {
			for n, k := range a.flags {
				if kb, ok := b.flags[n]; ok && kb != k {
					t.Errorf("--%s is kind %d in kubelet %s and %d in %s: parseArgs needs the kubelet's version", n, k, a.release, kb, b.release)
				}
			}
			for c, n := range a.shorthands {
				if nb, ok := b.shorthands[c]; ok && nb != n {
					t.Errorf("-%c is --%s in kubelet %s and --%s in %s", c, n, a.release, nb, b.release)
				}
			}
		}
	}
}
