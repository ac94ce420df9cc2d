// Package doccheck reads documentation as text for the drift tests that hold
// it to the code: a package's doc comment, its paragraphs and code blocks,
// and the paths a code block names. It only reads files; the facts to check
// are each test's own.
package doccheck

import (
	"fmt"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// PackageDoc returns the doc comment of the Go package in dir as text
// (ast.CommentGroup.Text: "//" and one space stripped, a code block's lines
// still indented by a tab): the doc comments on the package clauses of its
// non-test .go files, in file name order, separated by a blank line. A
// package without one has "".
func PackageDoc(dir string) (string, error) {
	files, err := filepath.Glob(filepath.Join(dir, "*.go"))
	if err != nil {
		return "", err
	}
	slices.Sort(files)
	var docs []string
	fset := token.NewFileSet()
	for _, name := range files {
		if strings.HasSuffix(name, "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, name, nil, parser.PackageClauseOnly|parser.ParseComments)
		if err != nil {
			return "", err
		}
		if f.Doc != nil {
			docs = append(docs, f.Doc.Text())
		}
	}
	return strings.Join(docs, "\n"), nil
}

// GoDirs returns every directory under root that holds a .go file, skipping
// testdata directories, in lexical order.
func GoDirs(root string) ([]string, error) {
	var dirs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() {
			if d.Name() == "testdata" {
				return filepath.SkipDir
			}
			return nil
		}
		if strings.HasSuffix(path, ".go") {
			dirs = append(dirs, filepath.Dir(path))
		}
		return nil
	})
	slices.Sort(dirs)
	return slices.Compact(dirs), err
}

// Paragraphs splits text into its paragraphs, each with its lines joined by
// single spaces: runs of lines between blank lines, where each list item
// (a line starting "- " or "1. " after its indentation) starts a paragraph
// of its own. Code blocks (lines indented by a tab) are left out.
func Paragraphs(text string) []string {
	var out, cur []string
	flush := func() {
		if len(cur) > 0 {
			out = append(out, strings.Join(cur, " "))
			cur = nil
		}
	}
	for line := range strings.SplitSeq(text, "\n") {
		trimmed := strings.TrimSpace(line)
		switch {
		case trimmed == "":
			flush()
			continue
		case strings.HasPrefix(line, "\t"):
			flush()
			continue
		case listItem(trimmed):
			flush()
		}
		cur = append(cur, trimmed)
	}
	flush()
	return out
}

// listItem reports whether a trimmed line starts a list item: "- ", "* ",
// "+ " or a number followed by ". ".
func listItem(s string) bool {
	if len(s) >= 2 && strings.ContainsRune("-*+", rune(s[0])) && s[1] == ' ' {
		return true
	}
	i := 0
	for i < len(s) && s[i] >= '0' && s[i] <= '9' {
		i++
	}
	return i > 0 && strings.HasPrefix(s[i:], ". ")
}

// CodeAfter returns the lines of the first code block (lines indented by a
// tab) that follows the first paragraph containing phrase, without the tab.
func CodeAfter(text, phrase string) ([]string, error) {
	var code []string
	found := false
	for line := range strings.SplitSeq(text, "\n") {
		switch {
		case !found:
			found = strings.Contains(line, phrase)
		case strings.HasPrefix(line, "\t"):
			code = append(code, strings.TrimPrefix(line, "\t"))
		case len(code) > 0:
			return code, nil
		}
	}
	if len(code) > 0 {
		return code, nil
	}
	if !found {
		return nil, fmt.Errorf("no paragraph says %q", phrase)
	}
	return nil, fmt.Errorf("no code block after %q", phrase)
}

// Expand expands the brace alternatives of a path pattern as a shell does,
// "a/{b,c/d}/e" to "a/b/e" and "a/c/d/e", leftmost first. Braces do not
// nest; a pattern with an unbalanced brace is returned as it is.
func Expand(pattern string) []string {
	open := strings.IndexByte(pattern, '{')
	if open < 0 {
		return []string{pattern}
	}
	end := strings.IndexByte(pattern[open:], '}')
	if end < 0 {
		return []string{pattern}
	}
	end += open
	var out []string
	for alt := range strings.SplitSeq(pattern[open+1:end], ",") {
		out = append(out, Expand(pattern[:open]+alt+pattern[end+1:])...)
	}
	return out
}
