package main

import (
	"os"
	"regexp"
	"strings"
	"testing"
)

// referenceDoc is the reference whose flag lists are the commands' --help.
const referenceDoc = "../../docs/reference.md"

// TestReferenceHelp: each command's flag list in docs/reference.md, between
// <!-- begin help NAME --> and <!-- end help NAME -->, is the command's
// --help as the code prints it (with -update, it is rewritten so).
func TestReferenceHelp(t *testing.T) {
	b, err := os.ReadFile(referenceDoc)
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	for _, c := range commands() {
		if c.name == "version" {
			continue
		}
		code, _, help := runCmd(c.name, "--help")
		if code != 0 {
			t.Fatalf("hotplugd %s --help: exit %d\n%s", c.name, code, help)
		}
		// The version in the usage line of the top-level help is the
		// build's: the commands' own help names none.
		block := regexp.MustCompile(`(?s)<!-- begin help ` + regexp.QuoteMeta(c.name) + ` -->\n.*?<!-- end help ` + regexp.QuoteMeta(c.name) + ` -->\n`)
		want := "<!-- begin help " + c.name + " -->\n```\n" + strings.TrimRight(help, "\n") + "\n```\n<!-- end help " + c.name + " -->\n"
		got := block.FindString(doc)
		if got == "" {
			t.Errorf("%s has no <!-- begin help %s --> ... <!-- end help %s --> block", referenceDoc, c.name, c.name)
			continue
		}
		if got == want {
			continue
		}
		if *update {
			doc = strings.Replace(doc, got, want, 1)
			continue
		}
		t.Errorf("%s: the help of hotplugd %s is not current; run go test ./cmd/hotplugd -run TestReferenceHelp -update", referenceDoc, c.name)
	}
	if *update && doc != string(b) {
		if err := os.WriteFile(referenceDoc, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
