//go:build e2e

package node

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"
)

// result is one row of the table printed at the end of the run, in the
// columns of test/e2e's table.
type result struct {
	scenario string
	side     string // "kubelet alone" or "hotplugd"
	change   string
	// correct is the time from the QMP command or the boot to the Node
	// being correct, or why there is none.
	correct  string
	restarts int
	// writes are hotplugd's API writes caused by the change; -1 when
	// hotplugd did not run.
	writes float64
	note   string
}

var results struct {
	mu   sync.Mutex
	rows []result
}

func addResult(r result) {
	results.mu.Lock()
	defer results.mu.Unlock()
	results.rows = append(results.rows, r)
}

// print writes the table (Markdown) to w, in the order the scenarios ran.
func printResults(w io.Writer) {
	results.mu.Lock()
	defer results.mu.Unlock()
	if len(results.rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\ne2e node VM results (change -> Node correct: from the QMP command's reply, or QEMU's start for a boot, to the first Node read, every 100 ms, that shows it)")
	fmt.Fprintln(w, "| scenario | side | change | change -> Node correct | kubelet restarts | hotplugd API writes | notes |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	for _, r := range results.rows {
		writes := "-"
		if r.writes >= 0 {
			writes = fmt.Sprint(r.writes)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s | %s |\n", r.scenario, r.side, r.change, r.correct, r.restarts, writes,
			strings.ReplaceAll(r.note, "|", "/"))
	}
}

// seconds formats d as "4.21 s".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.2f s", d.Seconds())
}
