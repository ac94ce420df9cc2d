package doccheck

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// operatorDocs are the README and the docs an operator reads.
func operatorDocs(t *testing.T) map[string]string {
	t.Helper()
	root := filepath.Join("..", "..")
	files, err := filepath.Glob(filepath.Join(root, "docs", "*.md"))
	if err != nil {
		t.Fatal(err)
	}
	files = append(files, filepath.Join(root, "README.md"))
	docs := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		rel, _ := filepath.Rel(root, f)
		docs[filepath.ToSlash(rel)] = string(b)
	}
	if len(docs) < 5 {
		t.Fatalf("found %d docs: not the repository's", len(docs))
	}
	return docs
}

// prose is text with its code blocks and code spans blanked: what the
// docs say in their own words, not what a command prints.
// Their line breaks stay, so that line numbers are the file's.
func prose(text string) string {
	blank := func(code string) string { return strings.Repeat("\n", strings.Count(code, "\n")) }
	text = regexp.MustCompile("(?s)```.*?```").ReplaceAllStringFunc(text, blank)
	return regexp.MustCompile("`[^`]*`").ReplaceAllStringFunc(text, blank)
}

// TestDocsStandAlone: the README stays short (what, why, the quick starts,
// links: about 200 lines at most), and no doc names files outside the
// repository or calls the machine the tests ran on "this machine" (a
// reader's machine is another).
func TestDocsStandAlone(t *testing.T) {
	docs := operatorDocs(t)
	if n := strings.Count(docs["README.md"], "\n"); n > 200 {
		t.Errorf("README.md has %d lines; keep it to about 200 (what, why, the two quick starts, links) and move the rest to docs/", n)
	}
	outside := regexp.MustCompile(`shared/seeds|\.\./shared|/work/|\.library`)
	for name, text := range docs {
		if m := outside.FindString(text); m != "" {
			t.Errorf("%s names %q, outside the repository", name, m)
		}
		for i, line := range strings.Split(prose(text), "\n") {
			if strings.Contains(strings.ToLower(line), "this machine") {
				t.Errorf("%s:%d says \"this machine\" (say which: the test machine, the node): %s", name, i+1, strings.TrimSpace(line))
			}
		}
	}
}

// TestDocLinks: every relative link of the docs names a file of the
// repository, and an anchor in a Markdown file one of its headings.
func TestDocLinks(t *testing.T) {
	docs := operatorDocs(t)
	link := regexp.MustCompile(`\]\(([^)\s]+)\)`)
	for name, text := range docs {
		for _, m := range link.FindAllStringSubmatch(prose(text), -1) {
			target := m[1]
			if strings.Contains(target, "://") || strings.HasPrefix(target, "mailto:") {
				continue
			}
			path, anchor, _ := strings.Cut(target, "#")
			file := name
			if path != "" {
				file = filepath.ToSlash(filepath.Join(filepath.Dir(name), path))
			}
			b, err := os.ReadFile(filepath.Join("..", "..", file))
			if err != nil {
				if _, derr := os.Stat(filepath.Join("..", "..", file)); derr == nil {
					continue // a directory
				}
				t.Errorf("%s links to %s: %v", name, target, err)
				continue
			}
			if anchor != "" && strings.HasSuffix(file, ".md") && !hasAnchor(string(b), anchor) {
				t.Errorf("%s links to %s: %s has no heading with anchor #%s", name, target, file, anchor)
			}
		}
	}
}

// hasAnchor is whether a heading of the Markdown text has GitHub's anchor
// for it: lower case, punctuation but - and _ dropped, spaces as -.
func hasAnchor(text, anchor string) bool {
	drop := regexp.MustCompile(`[^\p{L}\p{N} _-]`)
	for _, line := range strings.Split(text, "\n") {
		h := strings.TrimLeft(line, "#")
		if h == line || !strings.HasPrefix(h, " ") {
			continue
		}
		slug := strings.ReplaceAll(drop.ReplaceAllString(strings.ToLower(strings.TrimSpace(h)), ""), " ", "-")
		if slug == anchor {
			return true
		}
	}
	return false
}

func TestHasAnchor(t *testing.T) {
	text := "# Title\n## `hotplugd run`\n### What a restart does to pods\nnot # a heading\n## HotplugdDown\n"
	for anchor, want := range map[string]bool{
		"title": true, "hotplugd-run": true, "what-a-restart-does-to-pods": true, "hotplugddown": true,
		"a-heading": false, "hotplugd": false,
	} {
		if got := hasAnchor(text, anchor); got != want {
			t.Errorf("hasAnchor(%q) = %v, want %v", anchor, got, want)
		}
	}
}
