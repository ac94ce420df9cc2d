package kubeletconfig

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io/fs"
	"path"
	"path/filepath"

	jsonpatch "gopkg.in/evanphx/json-patch.v4"
	kubeletv1beta1 "k8s.io/kubelet/config/v1beta1"
	sigsjson "sigs.k8s.io/json"
	"sigs.k8s.io/yaml"
)

// dropinExt is the only extension the kubelet reads in --config-dir.
const dropinExt = ".conf"

// applyDropins merges the drop-in files of --config-dir (dir, absolute as the
// kubelet sees it) over c, as the kubelet's mergeKubeletConfigurations
// (cmd/kubelet/app/server.go) does:
//   - the configuration so far is marshalled to JSON (with its defaults and,
//     from a --config file, the default evictionHard already applied);
//   - every file named *.conf under dir, subdirectories included, in the
//     lexical order of filepath.WalkDir, must be a v1beta1
//     KubeletConfiguration and is applied as a JSON merge patch (RFC 7386)
//     by the library the kubelet calls, json-patch's MergePatch: maps such
//     as evictionHard or kubeReserved merge key by key, lists and scalars
//     replace, null deletes;
//   - the result is decoded and defaulted again (no evictionHard default:
//     that one belongs to loading --config only).
//
// Like filepath.WalkDir, a dir that is itself a symlink is not descended
// into: the kubelet then reads no drop-ins from it (or fails to read it as a
// file if its name ends in .conf). The merged document is decoded
// case-sensitively like Parse, where the kubelet's encoding/json is lenient
// about case.
func applyDropins(c *kubeletv1beta1.KubeletConfiguration, fsys hostFS, dir string) (*kubeletv1beta1.KubeletConfiguration, error) {
	doc, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	apply := func(name string) error {
		patch, err := readDropin(fsys, name)
		if err != nil {
			return err
		}
		if doc, err = jsonpatch.MergePatch(doc, patch); err != nil {
			return fmt.Errorf("merge drop-in %s: %w", filepath.Join(string(fsys), filepath.FromSlash(name)), err)
		}
		return nil
	}
	link, err := fsys.isSymlink(dir)
	if err != nil {
		return nil, fmt.Errorf("walk --config-dir: %w", err)
	}
	if link {
		if filepath.Ext(dir) == dropinExt {
			if err := apply(rel(dir)); err != nil {
				return nil, err
			}
		}
	} else {
		err = fs.WalkDir(fsys, rel(dir), func(name string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if d.IsDir() || path.Ext(d.Name()) != dropinExt {
				return nil
			}
			return apply(name)
		})
		if err != nil {
			return nil, fmt.Errorf("walk --config-dir: %w", err)
		}
	}
	out := &kubeletv1beta1.KubeletConfiguration{}
	if err := sigsjson.UnmarshalCaseSensitivePreserveInts(doc, out); err != nil {
		return nil, fmt.Errorf("decode configuration merged from --config-dir %s: %w", dir, err)
	}
	setDefaults(out, false)
	return out, nil
}

// readDropin reads one drop-in file as a JSON document.
func readDropin(fsys hostFS, name string) ([]byte, error) {
	hostPath := filepath.Join(string(fsys), filepath.FromSlash(name))
	b, err := fsys.readFile(name)
	if err != nil {
		return nil, fmt.Errorf("read drop-in: %w", err)
	}
	if len(b) == 0 {
		return nil, fmt.Errorf("drop-in %s is empty", hostPath)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("parse drop-in %s: %w", hostPath, err)
	}
	doc, err := decodeJSON(j)
	if err != nil {
		return nil, fmt.Errorf("parse drop-in %s: %w", hostPath, err)
	}
	m, _ := doc.(map[string]any)
	if m["apiVersion"] != APIVersion || m["kind"] != Kind {
		return nil, fmt.Errorf("drop-in %s: apiVersion %v kind %v, want apiVersion %s and kind %s", hostPath, m["apiVersion"], m["kind"], APIVersion, Kind)
	}
	return j, nil
}

// decodeJSON decodes a JSON document keeping numbers exact.
func decodeJSON(b []byte) (any, error) {
	d := json.NewDecoder(bytes.NewReader(b))
	d.UseNumber()
	var v any
	if err := d.Decode(&v); err != nil {
		return nil, err
	}
	return v, nil
}
