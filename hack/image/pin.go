package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"regexp"
	"strings"

	"github.com/google/go-containerregistry/pkg/name"
)

// pinOptions are the pin command's flags.
type pinOptions struct {
	kustomization string
	name          string
	newName       string
	digest        string
}

func (o *pinOptions) addFlags(fs *flag.FlagSet) {
	fs.StringVar(&o.kustomization, "kustomization", "", "kustomization.yaml to edit, e.g. deploy/kubernetes/kustomization.yaml (required)")
	fs.StringVar(&o.name, "name", "", "the name: of the images: entry to pin, e.g. ghcr.io/hotplugd/hotplugd (required)")
	fs.StringVar(&o.newName, "new-name", "", "repository the entry's newName: becomes, e.g. registry.example.com/ops/hotplugd (required)")
	fs.StringVar(&o.digest, "digest", "", "sha256:<64 hex> the entry's digest: becomes (required)")
}

var digestRE = regexp.MustCompile(`^sha256:[0-9a-f]{64}$`)

func (o *pinOptions) validate() error {
	switch {
	case o.kustomization == "":
		return errors.New("pin: no --kustomization given: pass the file, e.g. deploy/kubernetes/kustomization.yaml")
	case o.name == "":
		return errors.New("pin: no --name given: pass the image name the entry has, e.g. ghcr.io/hotplugd/hotplugd")
	case o.newName == "":
		return errors.New("pin: no --new-name given: pass the repository pushed to, e.g. registry.example.com/ops/hotplugd")
	}
	if !digestRE.MatchString(o.digest) {
		return fmt.Errorf("pin: --digest %q is not a digest: want sha256: and 64 lowercase hex digits, as the last line of `image push` or `image digest` prints", o.digest)
	}
	if _, err := name.NewRepository(o.newName, name.StrictValidation); err != nil {
		return fmt.Errorf("pin: --new-name %q: want a repository without tag or digest: %w", o.newName, err)
	}
	return nil
}

func runPin(args []string, stdout, stderr io.Writer) error {
	var o pinOptions
	fs := flag.NewFlagSet("pin", flag.ContinueOnError)
	o.addFlags(fs)
	if err := parseOnlyFlags(fs, args, stderr); err != nil {
		return err
	}
	if err := o.validate(); err != nil {
		return err
	}
	src, err := os.ReadFile(o.kustomization)
	if err != nil {
		return fmt.Errorf("pin: %w", err)
	}
	out, err := pinImage(src, o.name, o.newName, o.digest)
	if err != nil {
		return fmt.Errorf("pin: %s: %w", o.kustomization, err)
	}
	st, err := os.Stat(o.kustomization)
	if err != nil {
		return fmt.Errorf("pin: %w", err)
	}
	if err := writeFileAtomic(o.kustomization, st.Mode().Perm(), writeBytes(out)); err != nil {
		return fmt.Errorf("pin: write %s: %w", o.kustomization, err)
	}
	fmt.Fprintf(stdout, "%s: %s -> %s@%s\n", o.kustomization, o.name, o.newName, o.digest)
	return nil
}

// yamlLine is one line of the file, split for editing: its terminator is
// kept so unchanged lines are written back byte for byte.
type yamlLine struct {
	text string // without the terminator
	eol  string // "\n", "\r\n" or "" (last line)
}

func splitLines(b []byte) []yamlLine {
	var lines []yamlLine
	for len(b) > 0 {
		i := bytes.IndexByte(b, '\n')
		if i < 0 {
			lines = append(lines, yamlLine{text: string(b)})
			break
		}
		l := yamlLine{text: string(b[:i]), eol: "\n"}
		if strings.HasSuffix(l.text, "\r") {
			l.text, l.eol = l.text[:len(l.text)-1], "\r\n"
		}
		lines = append(lines, l)
		b = b[i+1:]
	}
	return lines
}

func indentOf(s string) int { return len(s) - len(strings.TrimLeft(s, " ")) }

// blank says a line holds nothing YAML reads: empty or only a comment.
func blank(s string) bool {
	t := strings.TrimSpace(s)
	return t == "" || strings.HasPrefix(t, "#")
}

// keyLine matches `key: value  # comment` after the indentation (and after
// "- " on an item's first line).
var keyLine = regexp.MustCompile(`^([A-Za-z][A-Za-z0-9_]*):(?:[ \t]+(.*?))?([ \t]+#.*)?$`)

// imageField is one `key: value` of an images: entry.
type imageField struct {
	line    int // index into the lines
	key     string
	value   string // unquoted
	col     int    // column of the key
	comment string // trailing comment with its leading blanks, or ""
}

// imageEntry is one item of images:.
type imageEntry struct {
	first  int // line of its "-"
	col    int // column of its keys
	fields []imageField
}

func (e imageEntry) field(key string) (imageField, bool) {
	for _, f := range e.fields {
		if f.key == key {
			return f, true
		}
	}
	return imageField{}, false
}

// pinImage rewrites the images: entry whose name is imageName to newName and
// digest, dropping newTag. Every other line, comments included, is kept as it
// is; an existing newTag line becomes the digest line in place.
func pinImage(src []byte, imageName, newName, digest string) ([]byte, error) {
	lines := splitLines(src)
	entries, err := imageEntries(lines)
	if err != nil {
		return nil, err
	}
	var found []imageEntry
	var names []string
	for _, e := range entries {
		n, _ := e.field("name")
		names = append(names, n.value)
		if n.value == imageName {
			found = append(found, e)
		}
	}
	switch len(found) {
	case 0:
		return nil, fmt.Errorf("images: has no entry with name: %s (it has %q); add one:\n  - name: %s\nor pass the --name the file uses", imageName, names, imageName)
	case 1:
	default:
		return nil, fmt.Errorf("images: has %d entries with name: %s; keep one", len(found), imageName)
	}
	e := found[0]
	nameField, _ := e.field("name")
	eol := lines[nameField.line].eol
	if eol == "" {
		eol = "\n"
	}
	set := func(f imageField, key, value string) {
		l := &lines[f.line]
		l.text = l.text[:f.col] + key + ": " + value + f.comment
	}
	newLine := func(key, value string) yamlLine {
		return yamlLine{text: strings.Repeat(" ", e.col) + key + ": " + value, eol: eol}
	}
	// insert[i] are new lines to write after line i.
	insert := map[int][]yamlLine{}
	remove := map[int]bool{}

	after := nameField.line
	if f, ok := e.field("newName"); ok {
		set(f, "newName", newName)
		after = f.line
	} else {
		insert[after] = append(insert[after], newLine("newName", newName))
	}
	tag, hasTag := e.field("newTag")
	if f, ok := e.field("digest"); ok {
		set(f, "digest", digest)
		if hasTag {
			if tag.line == e.first {
				return nil, fmt.Errorf("line %d: newTag: is the entry's first key: move name: first, then pin again", tag.line+1)
			}
			remove[tag.line] = true
		}
	} else if hasTag {
		set(tag, "digest", digest)
	} else {
		insert[after] = append(insert[after], newLine("digest", digest))
	}

	var out bytes.Buffer
	for i, l := range lines {
		if !remove[i] {
			out.WriteString(l.text)
			out.WriteString(l.eol)
		}
		for _, n := range insert[i] {
			if l.eol == "" { // the file did not end in a newline
				out.WriteString(eol)
			}
			out.WriteString(n.text)
			if i < len(lines)-1 || l.eol != "" {
				out.WriteString(n.eol)
			}
		}
	}
	return out.Bytes(), nil
}

// imageEntries finds the top-level images: list and its block-style items.
func imageEntries(lines []yamlLine) ([]imageEntry, error) {
	start := -1
	for i, l := range lines {
		if l.text == "---" && i > 0 {
			return nil, fmt.Errorf("line %d: more than one YAML document; a kustomization is one", i+1)
		}
		if indentOf(l.text) != 0 || !strings.HasPrefix(l.text, "images:") {
			continue
		}
		if start >= 0 {
			return nil, fmt.Errorf("line %d: images: appears twice (first on line %d); merge them", i+1, start+1)
		}
		if rest := strings.TrimSpace(strings.TrimPrefix(l.text, "images:")); rest != "" && !strings.HasPrefix(rest, "#") {
			return nil, fmt.Errorf("line %d: images: is written inline (%s); write it as a block list of `- name:` entries", i+1, rest)
		}
		start = i
	}
	if start < 0 {
		return nil, errors.New("no top-level images: list; add\nimages:\n  - name: <the image name the manifests use>\nand pin again")
	}

	var entries []imageEntry
	seqCol := -1
	cur := -1 // index into entries
	for i := start + 1; i < len(lines); i++ {
		t := lines[i].text
		if blank(t) {
			continue
		}
		ind := indentOf(t)
		body := t[ind:]
		isItem := body == "-" || strings.HasPrefix(body, "- ")
		if ind == 0 && !isItem {
			break // the next top-level key
		}
		if seqCol < 0 {
			if !isItem {
				return nil, fmt.Errorf("line %d: images: holds %q, not a list of `- name:` entries", i+1, strings.TrimSpace(t))
			}
			seqCol = ind
		}
		if ind < seqCol {
			break
		}
		if ind == seqCol {
			if !isItem {
				break
			}
			entries = append(entries, imageEntry{first: i, col: -1})
			cur = len(entries) - 1
			rest := strings.TrimLeft(body[1:], " ")
			if rest == "" || strings.HasPrefix(rest, "#") {
				continue // `-` alone: the keys follow on the next lines
			}
			if strings.HasPrefix(rest, "{") {
				return nil, fmt.Errorf("line %d: a flow-style entry (%s); write it as block-style `- name: ...` lines", i+1, rest)
			}
			col := len(t) - len(rest)
			entries[cur].col = col
			if err := entries[cur].addField(i, t, col); err != nil {
				return nil, err
			}
			continue
		}
		// A line inside the current entry.
		e := &entries[cur]
		if e.col < 0 {
			e.col = ind
		}
		if ind == e.col {
			if err := e.addField(i, t, ind); err != nil {
				return nil, err
			}
		}
		// Deeper lines continue the previous key's value: kept as they are.
	}
	return entries, nil
}

func (e *imageEntry) addField(i int, t string, col int) error {
	m := keyLine.FindStringSubmatch(t[col:])
	if m == nil {
		return fmt.Errorf("line %d: %q is not a `key: value` of an images: entry", i+1, strings.TrimSpace(t))
	}
	e.fields = append(e.fields, imageField{line: i, key: m[1], value: unquote(m[2]), col: col, comment: m[3]})
	return nil
}

func unquote(v string) string {
	if len(v) >= 2 && (v[0] == '"' && v[len(v)-1] == '"' || v[0] == '\'' && v[len(v)-1] == '\'') {
		return v[1 : len(v)-1]
	}
	return v
}
