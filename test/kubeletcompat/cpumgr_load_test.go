package kubeletcompat_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/kubernetes/pkg/kubelet/checkpointmanager/checksum"
	"k8s.io/utils/dump"

	"github.com/hotplugd/hotplugd/pkg/cpumgr"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
	"github.com/hotplugd/hotplugd/test/kubeletcompat/oracle"
)

// cpuLoadInputs are checkpoint files around the golden ones: the kubelet's
// own files, their keys in other cases, their checksums changed or zeroed,
// fields of the wrong type, null and empty maps, truncations, other JSON
// values, and the V1 and V4 layouts.
func cpuLoadInputs(t *testing.T) map[string][]byte {
	t.Helper()
	read := func(name string) string {
		b, err := os.ReadFile(filepath.Join("..", "..", "pkg", "cpumgr", "testdata", name+".cpu_manager_state"))
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	base := map[string]string{
		"c01": read("c01-static-4cpu-empty"),
		"c03": read("c03-static-8cpu-2entries"),
		"c12": read("c12-entry-overlaps-default"),
		"c15": read("c15-empty-default-no-entries"),
		"c16": read("c16-policy-none"),
		"c19": read("c19-v3-podentries"),
	}
	checksums := map[string]string{
		"c01": "611748604", "c03": "3413913315", "c12": "677687389",
		"c15": "3083571066", "c16": "1353318690", "c19": "4131199150",
	}
	in := map[string][]byte{}
	for name, b := range base {
		ck := checksums[name]
		in[name] = []byte(b)
		in[name+" checksum+1"] = []byte(strings.Replace(b, ck, ck[:len(ck)-1]+string(ck[len(ck)-1]^1), 1))
		in[name+" checksum 0"] = []byte(strings.Replace(b, ck, "0", 1))
		in[name+" checksum string"] = []byte(strings.Replace(b, ck, `"`+ck+`"`, 1))
		in[name+" checksum negative"] = []byte(strings.Replace(b, ck, "-"+ck, 1))
		in[name+" checksum + 2^32"] = []byte(strings.Replace(b, ck, fmt.Sprint(4294967296+atoi(t, ck)), 1))
		in[name+" checksum float"] = []byte(strings.Replace(b, ck, ck+".0", 1))
		in[name+" keys upper case"] = []byte(strings.NewReplacer(`"policyName"`, `"POLICYNAME"`, `"defaultCpuSet"`, `"DefaultCPUSet"`, `"entries"`, `"Entries"`, `"podEntries"`, `"PODENTRIES"`, `"checksum"`, `"Checksum"`).Replace(b))
		in[name+" unknown key"] = []byte(strings.Replace(b, `{"policyName"`, `{"x":[1,{}],"policyName"`, 1))
		in[name+" duplicate policy"] = []byte(strings.Replace(b, `{"policyName"`, `{"policyName":"other","policyName"`, 1))
		in[name+" pretty"] = indent(t, b)
		in[name+" trailing garbage"] = []byte(b + "x")
		in[name+" trailing newline"] = []byte(b + "\n")
		in[name+" default not canonical"] = []byte(strings.Replace(b, `"defaultCpuSet":"0-`, `"defaultCpuSet":"0,0-`, 1))
		in[name+" default a number"] = []byte(strings.Replace(b, `"defaultCpuSet":"`, `"defaultCpuSet":7,"x":"`, 1))
		in[name+" policy a number"] = []byte(strings.Replace(b, `"policyName":"`, `"policyName":1,"x":"`, 1))
		for _, n := range []int{1, len(b) / 3, len(b) / 2, len(b) - 1} {
			in[fmt.Sprintf("%s truncated at %d", name, n)] = []byte(b[:n])
		}
	}
	in["c01 entries null"] = []byte(strings.Replace(base["c01"], `,"checksum"`, `,"entries":null,"checksum"`, 1))
	in["c01 entries empty"] = []byte(strings.Replace(base["c01"], `,"checksum"`, `,"entries":{},"checksum"`, 1))
	in["c01 entries null checksum 0"] = []byte(`{"policyName":"static","defaultCpuSet":"0-3","entries":null,"checksum":0}`)
	in["c03 a pod with null containers"] = []byte(strings.Replace(base["c03"], `{"db":"4-5"}`, `null`, 1))
	in["c03 a pod without containers"] = []byte(strings.Replace(base["c03"], `{"db":"4-5"}`, `{}`, 1))
	in["c03 cpuset a number"] = []byte(strings.Replace(base["c03"], `"4-5"`, `45`, 1))
	in["c03 bad cpuset checksum 0"] = []byte(strings.Replace(strings.Replace(base["c03"], `"4-5"`, `"5-4"`, 1), "3413913315", "0", 1))
	in["c19 bad pod cpuset"] = []byte(strings.Replace(base["c19"], `{"cpuSet":"2-3"}`, `{"cpuSet":"3-2"}`, 1))
	in["c19 podEntries null"] = []byte(strings.Replace(base["c19"], `"podEntries":{"6f1c2b9e-4a57-4e0b-9a55-1d2c3b4a5f60":{"cpuSet":"2-3"}}`, `"podEntries":null`, 1))
	in["v1 with a container, checksum 0"] = []byte(`{"policyName":"static","defaultCpuSet":"0-1,4-7","entries":{"containerd://0123abcd":"2-3"},"checksum":0}`)
	in["v1 without entries, checksum 0"] = []byte(`{"policyName":"static","defaultCpuSet":"0-7","entries":{},"checksum":0}`)
	in["v1 as an old kubelet wrote it, with a container"] = v1Checkpoint(t, "0-1,4-7", map[string]string{"containerd://0123abcd": "2-3"})
	in["v1 as an old kubelet wrote it, without containers"] = v1Checkpoint(t, "0-7", map[string]string{})
	for name, b := range map[string]string{
		"empty file": "", "null": "null", "array": "[]", "string": `"static"`, "number": "1",
		"empty object": "{}", "not json": "policyName: static", "nul bytes": "\x00\x00",
		"only checksum": `{"checksum":0}`, "memory manager state": `{"policyName":"None","machineState":{},"checksum":0}`,
	} {
		in[name] = []byte(b)
	}
	return in
}

func atoi(t *testing.T, s string) int64 {
	t.Helper()
	var n int64
	if _, err := fmt.Sscan(s, &n); err != nil {
		t.Fatal(err)
	}
	return n
}

func indent(t *testing.T, s string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := json.Indent(&b, []byte(s), "", "  "); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestCPUManagerLoadMatchesKubelet gives the kubelet's CPU manager and
// hotplugd the same files, under both settings of the
// PodLevelResourceManagers gate, on 8 CPUs with 1 reserved: where hotplugd
// reads a file (Parse) and validates it, its verdict is the kubelet's word
// for word; where it refuses a format (FormatError), the kubelet refuses the
// file too.
func TestCPUManagerLoadMatchesKubelet(t *testing.T) {
	inputs := cpuLoadInputs(t)
	for _, gate := range []bool{false, true} {
		k := cpuKubelet{reserved: "1"}
		if gate {
			k.gates = map[string]bool{"PodLevelResourceManagers": true}
		}
		t.Run(fmt.Sprintf("PodLevelResourceManagers=%v", gate), func(t *testing.T) {
			k.setGates(t)
			m := newCPUMachine(t, cpuLine(8, 1))
			var accepted, refused, formats int
			for name, b := range inputs {
				dir := t.TempDir()
				path := filepath.Join(dir, cpuStateFile)
				_, kerr := kubeletStartWith(t, m, k, dir, b)
				_, perr := cpumgr.Parse(b)
				var fe *cpumgr.FormatError
				if errors.As(perr, &fe) {
					formats++
					if kerr == nil {
						t.Errorf("%s: hotplugd refuses format %q (%v), the kubelet starts", name, fe.Format, perr)
					}
					continue
				}
				if kerr == nil {
					accepted++
				} else {
					refused++
				}
				if got, want := hotplugdVerdict(t, m, k, path, b), errText(kerr); got != want {
					t.Errorf("%s: %q\nhotplugd says %q\nthe kubelet  %q", name, b, got, want)
				}
			}
			t.Logf("%d files: the kubelet starts with %d and refuses %d as hotplugd predicts; hotplugd refuses %d formats the kubelet refuses too",
				len(inputs), accepted, refused, formats)
		})
	}
}

// TestCPUManagerV4: a 1.37 (V4) file with a payload that does not verify,
// beside valid V2 fields: kubelet 1.37 refuses it, older kubelets read the
// V2 fields; hotplugd says what the kubelet under test says.
func TestCPUManagerV4(t *testing.T) {
	b := []byte(`{"policyName":"static","defaultCpuSet":"0-7","checksum":0,"data":"{\"policyName\":\"static\",\"defaultCpuSet\":\"0-7\"}","dataChecksum":1}`)
	k := cpuKubelet{reserved: "1"}
	k.setGates(t)
	m := newCPUMachine(t, cpuLine(8, 1))
	dir := t.TempDir()
	_, err := kubeletStartWith(t, m, k, dir, b)
	if got, want := hotplugdVerdict(t, m, k, filepath.Join(dir, cpuStateFile), b), errText(err); got != want {
		t.Errorf("kubelet %s: hotplugd says %q, the kubelet %q", oracle.KubeletVersion(), got, want)
	}
	if hotplugdRelease(t).CPUState == kubeletversion.CPUStateV4 && err == nil {
		t.Errorf("kubelet %s starts with a V4 payload that does not verify", oracle.KubeletVersion())
	}
}

// CPUManagerCheckpoint is the V1 checkpoint as kubelets before 1.18
// declared it (pkg/kubelet/cm/cpumanager/state/checkpoint.go), the struct a
// V1 checksum is computed over. Kubelets up to 1.36 still read V1 files (as
// CPUManagerCheckpointV1); 1.37 has no V1.
type CPUManagerCheckpoint struct {
	PolicyName    string            `json:"policyName"`
	DefaultCPUSet string            `json:"defaultCpuSet"`
	Entries       map[string]string `json:"entries,omitempty"`
	Checksum      checksum.Checksum `json:"checksum"`
}

// v1Checkpoint is a V1 checkpoint as kubelets before 1.18 wrote it: the
// checksum is FNV-32a over the dump of their struct, named
// state.CPUManagerCheckpoint, the name a V1 check up to 1.36 hashes under.
// (v1.36.3's own V1 MarshalCheckpoint hashes under CPUManagerCheckpointV1,
// which its V1 check does not accept; nothing calls it.)
func v1Checkpoint(t *testing.T, def string, entries map[string]string) []byte {
	t.Helper()
	cp := &CPUManagerCheckpoint{PolicyName: "static", DefaultCPUSet: def, Entries: entries}
	h := fnv.New32a()
	h.Write([]byte(strings.Replace(dump.ForHash(cp), "kubeletcompat_test.CPUManagerCheckpoint", "state.CPUManagerCheckpoint", 1)))
	cp.Checksum = checksum.Checksum(h.Sum32())
	b, err := json.Marshal(cp)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// TestCPUManagerPolicyBeforeCPUList records the one wording difference
// between Parse and the kubelet: a checkpoint of another policy whose CPU
// list does not parse. The kubelet checks the policy first; Parse refuses
// the CPU list before any policy is known. Both refuse the file.
func TestCPUManagerPolicyBeforeCPUList(t *testing.T) {
	b := []byte(`{"policyName":"none","defaultCpuSet":"3-0","checksum":0}`)
	k := cpuKubelet{reserved: "1"}
	k.setGates(t)
	m := newCPUMachine(t, cpuLine(8, 1))
	_, kerr := kubeletStartWith(t, m, k, t.TempDir(), b)
	if kerr == nil || !strings.Contains(kerr.Error(), `configured policy "static" differs from state checkpoint policy "none"`) {
		t.Errorf("the kubelet says %v", kerr)
	}
	if _, err := cpumgr.Parse(b); !errors.Is(err, cpumgr.ErrCorrupt) || !strings.Contains(err.Error(), `could not parse default cpu set "3-0"`) {
		t.Errorf("Parse() error = %v", err)
	}
}
