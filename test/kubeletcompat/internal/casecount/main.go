// Command casecount summarizes the oracle tests of one kubelet release from
// `go test -json` output on stdin: for each category (capacity,
// allocatable, CPU state, memory state, kubelet start, preflight, other) how
// many cases agreed with the kubelet (passed), disagreed (failed) or do not
// apply to the release (skipped), where a case is a test or subtest without
// subtests. It prints one summary line, then the counts tests log on a line
// of their own starting with "casecount: " (t.Logf("casecount: rule: N
// cases, ...")), one per line, then the first lines of each failure (and of
// a package that failed to build), and exits 1 if anything failed.
//
//	go test -json ./... | go run ./internal/casecount -label v1.37.2
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"regexp"
	"slices"
	"strings"
)

// categories maps top-level test names to what they judge.
var categories = []struct {
	name string
	re   *regexp.Regexp
}{
	{"capacity", regexp.MustCompile(`^(TestCapacity|TestIntegrationCapacity|TestUnknownTopologyIDs)`)},
	{"allocatable", regexp.MustCompile(`^TestAllocatable`)},
	{"cpu-state", regexp.MustCompile(`^TestCPUManager`)},
	{"memory-state", regexp.MustCompile(`^TestMemoryManager`)},
	{"kubelet-start", regexp.MustCompile(`^TestKubeletStart`)},
	{"preflight", regexp.MustCompile(`^TestPreflight`)},
	{"other", regexp.MustCompile(``)},
}

// noise is test output left out of a failure's lines: the test framework's
// own lines and the kubelet's klog lines (feature gates set, managers
// created, the errors it logs before returning them).
var noise = regexp.MustCompile(`^\s*(=== |--- (PASS|FAIL|SKIP)|(\S+\.go:\d+: )?[IWE]\d{4} \d\d:\d\d)`)

// logged is a count a test logs for this summary: "casecount: " and the
// rest of the line, after t.Logf's file:line prefix.
var logged = regexp.MustCompile(`^\s*(?:\S+\.go:\d+: )?casecount: (.*)$`)

// event is a test2json event.
type event struct {
	Action     string
	Package    string
	Test       string
	Output     string
	ImportPath string // build-output
}

type result struct {
	action string
	output []string
}

func main() {
	label := flag.String("label", "", "name of the run in the summary line (the kubelet release)")
	lines := flag.Int("lines", 6, "lines of output shown per failure")
	flag.Parse()
	if err := run(os.Stdin, os.Stdout, *label, *lines); err != nil {
		fmt.Fprintln(os.Stderr, "casecount:", err)
		os.Exit(1)
	}
}

func run(in io.Reader, out io.Writer, label string, lines int) error {
	tests := map[string]*result{} // package + " " + test
	var pkgFailed []string
	var buildOutput []string // the compiler's messages, and go's own
	var counts []string      // logged by the tests
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var e event
		if err := json.Unmarshal(sc.Bytes(), &e); err != nil {
			buildOutput = append(buildOutput, sc.Text()) // go test's own stderr
			continue
		}
		switch {
		case e.Action == "build-output":
			buildOutput = append(buildOutput, strings.TrimRight(e.Output, "\n"))
		case e.Test == "" && e.Action == "fail":
			pkgFailed = append(pkgFailed, e.Package)
		case e.Test != "":
			key := e.Package + " " + e.Test
			r := tests[key]
			if r == nil {
				r = &result{}
				tests[key] = r
			}
			switch e.Action {
			case "output":
				s := strings.TrimRight(e.Output, "\n")
				if m := logged.FindStringSubmatch(s); m != nil {
					counts = append(counts, m[1])
					continue
				}
				if !noise.MatchString(s) {
					r.output = append(r.output, s)
				}
			case "pass", "fail", "skip":
				r.action = e.Action
			}
		}
	}
	if err := sc.Err(); err != nil {
		return err
	}

	// Cases are the tests without subtests.
	parent := map[string]bool{}
	for key := range tests {
		for i := strings.LastIndexByte(key, '/'); i > 0; i = strings.LastIndexByte(key[:i], '/') {
			parent[key[:i]] = true
		}
	}
	type count struct{ pass, fail, skip int }
	byCategory := map[string]*count{}
	for _, c := range categories {
		byCategory[c.name] = &count{}
	}
	var failures []string
	for _, key := range slices.Sorted(maps.Keys(tests)) {
		if parent[key] {
			continue
		}
		_, test, _ := strings.Cut(key, " ")
		c := byCategory[category(test)]
		switch r := tests[key]; r.action {
		case "pass":
			c.pass++
		case "skip":
			c.skip++
		default: // fail, or no result: the test binary died in it
			c.fail++
			failures = append(failures, fmt.Sprintf("%s FAIL %s\n    %s", label, test, strings.Join(head(r.output, lines), "\n    ")))
		}
	}

	sum := make([]string, 0, len(categories))
	for _, cat := range categories {
		c := byCategory[cat.name]
		s := fmt.Sprintf("%s %d agree", cat.name, c.pass)
		if c.fail > 0 {
			s += fmt.Sprintf(", %d FAIL", c.fail)
		}
		if c.skip > 0 {
			s += fmt.Sprintf(", %d skipped", c.skip)
		}
		sum = append(sum, s)
	}
	fmt.Fprintf(out, "%s: %s\n", label, strings.Join(sum, "; "))
	for _, c := range counts {
		fmt.Fprintf(out, "%s: %s\n", label, c)
	}
	for _, f := range failures {
		fmt.Fprintln(out, f)
	}
	if len(pkgFailed) > 0 && len(failures) == 0 {
		// No case failed: the package did not build or its binary died.
		fmt.Fprintf(out, "%s FAIL %s\n", label, strings.Join(pkgFailed, ", "))
		for _, l := range head(buildOutput, 4*lines) {
			fmt.Fprintf(out, "    %s\n", l)
		}
	}
	if len(failures) > 0 || len(pkgFailed) > 0 {
		return fmt.Errorf("%s: oracle tests failed", label)
	}
	return nil
}

// category is the category of the test (or subtest) name test.
func category(test string) string {
	top, _, _ := strings.Cut(test, "/")
	for _, c := range categories {
		if c.re.MatchString(top) {
			return c.name
		}
	}
	return "other"
}

func head(s []string, n int) []string {
	if len(s) > n {
		return s[:n]
	}
	return s
}
