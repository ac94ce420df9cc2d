package podnames

import (
	"io/fs"
	"os"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Pod is a pod as the kubelet names its log directory.
type Pod struct {
	Namespace string `json:"namespace,omitempty"`
	Name      string `json:"name,omitempty"`
	UID       string `json:"uid"`
}

// Named reports whether the pod's namespace and name are known.
func (p Pod) Named() bool { return p.Namespace != "" && p.Name != "" }

// String is "<namespace>/<name>", or "uid <uid>" when the name is not
// known.
func (p Pod) String() string {
	if !p.Named() {
		return "uid " + p.UID
	}
	return p.Namespace + "/" + p.Name
}

// Resolve names the pods of uids from the directory podLogsDir, a path in
// hotplugd's file system. The map holds the UIDs it found a pod log
// directory for; every other UID is left out: a podLogsDir that is "",
// missing or unreadable, a UID without a directory, or one that two
// directories name differently (it does not guess). It lists the directory
// once per call: no cache, it is read only when a drain is reported.
func Resolve(podLogsDir string, uids []string) map[string]Pod {
	return resolve(os.ReadDir, podLogsDir, uids)
}

// resolve is Resolve listing directories with readDir (os.ReadDir).
func resolve(readDir func(string) ([]fs.DirEntry, error), podLogsDir string, uids []string) map[string]Pod {
	out := map[string]Pod{}
	if podLogsDir == "" || len(uids) == 0 {
		return out
	}
	want := make(map[string]bool, len(uids))
	for _, uid := range uids {
		want[uid] = true
	}
	// On an error, what was read before it still names pods.
	entries, _ := readDir(podLogsDir)
	ambiguous := map[string]bool{}
	for _, e := range entries {
		// The kubelet makes directories; a file or a symlink here is not
		// one of them.
		if !e.IsDir() {
			continue
		}
		p, ok := parse(e.Name())
		if !ok || !want[p.UID] || ambiguous[p.UID] {
			continue
		}
		if q, seen := out[p.UID]; seen && q != p {
			delete(out, p.UID)
			ambiguous[p.UID] = true
			continue
		}
		out[p.UID] = p
	}
	return out
}

// parse reads a pod log directory's name, <namespace>_<name>_<uid>: the
// namespace up to the first "_", the UID after the last. A namespace that
// is not a DNS label or a name that is not a DNS subdomain (an "_" in it,
// a name of another layout, such as the kubelet's old one, a bare UID) is
// not a pod log directory.
func parse(dir string) (Pod, bool) {
	ns, rest, ok := strings.Cut(dir, "_")
	if !ok {
		return Pod{}, false
	}
	i := strings.LastIndexByte(rest, '_')
	if i < 0 {
		return Pod{}, false
	}
	name, uid := rest[:i], rest[i+1:]
	if uid == "" || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return Pod{}, false
	}
	return Pod{Namespace: ns, Name: name, UID: uid}, true
}
