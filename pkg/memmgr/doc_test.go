package memmgr

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/internal/doccheck"
	"github.com/hotplugd/hotplugd/pkg/kubeletversion"
)

// formats are the package's Formats by their constant's name, FormatV1 on,
// as far as String knows them.
func formats() map[string]Format {
	out := map[string]Format{}
	for f := Format(0); !strings.HasPrefix(f.String(), "Format("); f++ {
		name, _, _ := strings.Cut(f.String(), " ")
		out["Format"+name] = f
	}
	return out
}

// TestDocNamesWhatEachReleaseWrites: the package doc names every Format,
// and its paragraph on Config.Release names every release of the table,
// the clause of each (up to the next ";") naming every layout that
// release's memory manager writes, under either setting of
// PodLevelResourceManagers.
func TestDocNamesWhatEachReleaseWrites(t *testing.T) {
	doc, err := doccheck.PackageDoc(".")
	if err != nil {
		t.Fatal(err)
	}
	all := formats()
	if len(all) < 3 {
		t.Fatalf("formats() = %v", all)
	}
	named := regexp.MustCompile(`\bFormatV\d+\b`)
	for name := range all {
		if !strings.Contains(doc, name) {
			t.Errorf("the package doc does not name %s", name)
		}
	}
	for _, name := range named.FindAllString(doc, -1) {
		if _, ok := all[name]; !ok {
			t.Errorf("the package doc names %s, which the package does not have", name)
		}
	}

	var para string
	for _, p := range doccheck.Paragraphs(doc) {
		if strings.Contains(p, "Config.Release") {
			para = p
			break
		}
	}
	if para == "" {
		t.Fatal("the package doc has no paragraph on Config.Release")
	}
	for _, rel := range kubeletversion.Releases() {
		minor := regexp.MustCompile(`\b1\.` + strconv.Itoa(rel.Minor) + `\b`)
		var clauses []string
		for clause := range strings.SplitSeq(para, ";") {
			if minor.MatchString(clause) {
				clauses = append(clauses, clause)
			}
		}
		if len(clauses) == 0 {
			t.Errorf("the package doc does not say what kubelet 1.%d does: %q", rel.Minor, para)
			continue
		}
		said := strings.Join(clauses, ";")
		for _, gate := range []bool{false, true} {
			f := formatFor(Config{Release: rel, PodLevelResourceManagers: gate})
			name := "Format" + strings.Fields(f.String())[0]
			if !regexp.MustCompile(`\b` + name + `\b`).MatchString(said) {
				t.Errorf("the package doc does not say kubelet 1.%d (PodLevelResourceManagers=%v) writes %s: %q", rel.Minor, gate, name, said)
			}
		}
	}
}
