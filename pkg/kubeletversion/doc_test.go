package kubeletversion

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/hotplugd/hotplugd/internal/doccheck"
)

// notReleases are the kubelet minors a package doc names on purpose although
// the table has no row for them, by package directory.
var notReleases = map[string][]int{
	// Examples of kubelets hotplugd does not know.
	"pkg/kubeletversion": {33, 38},
}

var (
	// patchRelease is a kubelet patch release: 1.36.3, v1.37.2, and
	// v1.38.0-alpha.0 with its pre-release part.
	patchRelease = regexp.MustCompile(`(?:^|[^\w.])(v?1\.(\d+)\.(\d+))(-[\w.]+)?`)
	// minorRelease is a minor release, 1.34, once patch releases are cut
	// out: two digits, so that "0.5-1.0 s" is none.
	minorRelease = regexp.MustCompile(`(?:^|[^\w.])1\.(\d\d)\b`)
	// releaseCount is a count of releases, "four kubelet releases".
	releaseCount = regexp.MustCompile(`(?i)\b(one|two|three|four|five|six|seven|eight|nine|ten)\s+(?:known\s+|supported\s+)?(?:kubelet\s+)?(?:minor\s+)?releases\b`)
)

var counts = []string{"zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten"}

// releaseProblems checks what text says of kubelet releases against the
// table: a paragraph that says test/kubeletcompat checks something against
// patch releases names every release it tests (it runs for every row), a
// count of releases is the table's, and, with strict, every patch release
// named is one the oracle tests run and every minor named has a row (but
// those of allowed).
func releaseProblems(text string, strict bool, allowed []int) []string {
	var tested []string
	for _, r := range releases {
		tested = append(tested, strings.TrimPrefix(r.Tested.String(), "v"))
	}
	var problems []string
	for _, p := range doccheck.Paragraphs(text) {
		var named []string
		for _, m := range patchRelease.FindAllStringSubmatch(p, -1) {
			if m[4] != "" {
				continue // a pre-release: never a row
			}
			v := strings.TrimPrefix(m[1], "v")
			named = append(named, v)
			if strict && !slices.Contains(tested, v) {
				problems = append(problems, fmt.Sprintf("names kubelet %s, not a release the oracle tests run (%s): %q", m[1], strings.Join(tested, ", "), p))
			}
		}
		if strings.Contains(p, "kubeletcompat") && len(named) > 0 {
			for _, v := range tested {
				if !slices.Contains(named, v) {
					problems = append(problems, fmt.Sprintf("says what test/kubeletcompat checks, for %s but not %s (it runs for every release in the table): %q", strings.Join(named, ", "), v, p))
				}
			}
		}
		if strict {
			rest := patchRelease.ReplaceAllString(p, " ")
			for _, m := range minorRelease.FindAllStringSubmatch(rest, -1) {
				minor, _ := strconv.Atoi(m[1])
				if ByMinor(minor) == nil && !slices.Contains(allowed, minor) {
					problems = append(problems, fmt.Sprintf("names kubelet 1.%d, which has no row in the table (%s): %q", minor, Known(), p))
				}
			}
		}
		for _, m := range releaseCount.FindAllStringSubmatch(p, -1) {
			if n := slices.Index(counts, strings.ToLower(m[1])); n != len(releases) {
				problems = append(problems, fmt.Sprintf("counts %s, the table has %d: %q", m[0], len(releases), p))
			}
		}
	}
	return problems
}

// TestPackageDocsNameKnownReleases: what the package docs under pkg/,
// internal/ and cmd/ say of kubelet releases is the table's: a patch release
// named is one the oracle tests run (a row's Tested), a minor named has a
// row (but those in notReleases), a paragraph that says test/kubeletcompat
// checks something names every release it tests, and a count of releases
// is the number of rows.
func TestPackageDocsNameKnownReleases(t *testing.T) {
	checked := 0
	for _, root := range []string{"pkg", "internal", "cmd"} {
		dirs, err := doccheck.GoDirs(filepath.Join("..", "..", root))
		if err != nil {
			t.Fatal(err)
		}
		for _, dir := range dirs {
			doc, err := doccheck.PackageDoc(dir)
			if err != nil {
				t.Fatal(err)
			}
			rel, _ := filepath.Rel(filepath.Join("..", ".."), dir)
			for _, p := range releaseProblems(doc, true, notReleases[filepath.ToSlash(rel)]) {
				t.Errorf("%s: package doc %s", rel, p)
			}
			checked++
		}
	}
	if checked < 20 {
		t.Fatalf("checked %d package docs: not the repository's", checked)
	}
}

// TestREADMENamesKnownReleases: where the README or the operators' docs
// (not docs/development.md, which is about building the tests, not what
// they check) say test/kubeletcompat checks something against patch
// releases, they name every release the oracle tests run, and a count of
// releases is the table's.
func TestREADMENamesKnownReleases(t *testing.T) {
	for _, f := range []string{"README.md", "docs/install.md", "docs/operate.md", "docs/reference.md"} {
		b, err := os.ReadFile(filepath.Join("..", "..", f))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range releaseProblems(string(b), false, nil) {
			t.Errorf("%s %s", f, p)
		}
	}
}

// TestReleaseProblems: each rule fails where it should.
func TestReleaseProblems(t *testing.T) {
	var tested []string
	for _, r := range releases {
		tested = append(tested, strings.TrimPrefix(r.Tested.String(), "v"))
	}
	all := strings.Join(tested, ", ")
	for _, tt := range []struct {
		text    string
		allowed []int
		want    int
	}{
		{"Checked in test/kubeletcompat against " + all + ".", nil, 0},
		{"Checked against kubelet v" + tested[0] + "'s own code in\ntest/kubeletcompat.", nil, len(tested) - 1},
		{"Built from kubelet v" + tested[0] + ".", nil, 0},
		{"Built from kubelet v1.30.1.", nil, 1},
		{"Kubelets 1.30 and 1.31 differ.", nil, 2},
		{"Everything else (a 1.99 alpha) is unknown.", []int{99}, 0},
		{"Not v1.99.0-alpha.0 nor 0.5-1.0 s.", nil, 0},
		{fmt.Sprintf("The %s kubelet releases.", counts[len(releases)]), nil, 0},
		{fmt.Sprintf("The %s kubelet releases.", counts[len(releases)+1]), nil, 1},
	} {
		if got := releaseProblems(tt.text, true, tt.allowed); len(got) != tt.want {
			t.Errorf("%q: %d problems, want %d: %q", tt.text, len(got), tt.want, got)
		}
	}
}
