//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"
)

// result is one row of the table printed at the end of the run.
type result struct {
	scenario string
	side     string // "kubelet alone", "hotplugd", ...
	change   string
	// correct is the time from the change to the Node being correct, or
	// why there is none ("never (15 s watched)").
	correct  string
	restarts int
	// writes are hotplugd's API writes (create + patch) caused by the
	// change; -1 when hotplugd did not run.
	writes float64
	note   string
}

type resultTable struct {
	mu   sync.Mutex
	rows []result
}

var results = &resultTable{}

func (r *resultTable) add(row result) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rows = append(r.rows, row)
}

// print writes the table (Markdown) to w; nothing when no scenario ran.
func (r *resultTable) print(w io.Writer) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.rows) == 0 {
		return
	}
	fmt.Fprintln(w, "\ne2e results (change -> Node correct: from the sysfs write's return to the first Node read, every 50 ms, that shows it)")
	fmt.Fprintln(w, "| scenario | side | change | change -> Node correct | kubelet restarts | hotplugd API writes | notes |")
	fmt.Fprintln(w, "|---|---|---|---|---|---|---|")
	rows := slices.Clone(r.rows)
	slices.SortStableFunc(rows, func(a, b result) int { return strings.Compare(a.scenario, b.scenario) })
	for _, row := range rows {
		writes := "-"
		if row.writes >= 0 {
			writes = fmt.Sprint(row.writes)
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %d | %s | %s |\n", row.scenario, row.side, row.change, row.correct,
			row.restarts, writes, strings.ReplaceAll(row.note, "|", "/"))
	}
}

// seconds formats d as "4.21 s".
func seconds(d time.Duration) string {
	return fmt.Sprintf("%.2f s", d.Seconds())
}
