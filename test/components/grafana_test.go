package components

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"sigs.k8s.io/yaml"

	"github.com/hotplugd/hotplugd/internal/metricsref"
)

// dashboardFile is the Grafana dashboard deploy/grafana ships.
var dashboardFile = filepath.Join(repoRoot, "deploy", "grafana", "hotplugd.json")

// nodeFilter is the matcher every selector of the dashboard carries: the
// node variable.
const nodeFilter = `node=~"$node"`

// targetLabels are the labels a scrape adds to every series (the
// PodMonitor's, docs/monitoring.md): a matcher or a grouping may name them
// whatever the metric.
var targetLabels = []string{"job", "instance", "node", "namespace", "pod", "container", "endpoint"}

// dashboard is what the checks read of a Grafana dashboard's JSON model.
type dashboard struct {
	SchemaVersion int     `json:"schemaVersion"`
	UID           string  `json:"uid"`
	Title         string  `json:"title"`
	Panels        []panel `json:"panels"`
	Templating    struct {
		List []variable `json:"list"`
	} `json:"templating"`
}

type panel struct {
	ID         int             `json:"id"`
	Type       string          `json:"type"`
	Title      string          `json:"title"`
	Datasource json.RawMessage `json:"datasource"`
	Targets    []struct {
		RefID      string          `json:"refId"`
		Expr       string          `json:"expr"`
		Datasource json.RawMessage `json:"datasource"`
	} `json:"targets"`
	Panels []panel `json:"panels"` // a collapsed row's
}

type variable struct {
	Name       string          `json:"name"`
	Type       string          `json:"type"`
	Query      json.RawMessage `json:"query"` // a string, or the Prometheus editor's object with "query"
	Datasource json.RawMessage `json:"datasource"`
}

// query is a PromQL expression of the dashboard, with where it is.
type query struct {
	where, expr string
}

// allPanels returns the panels, a collapsed row's included, in order.
func allPanels(ps []panel) []panel {
	var out []panel
	for _, p := range ps {
		out = append(out, p)
		out = append(out, allPanels(p.Panels)...)
	}
	return out
}

// variableQuery is a query variable's query text.
func variableQuery(v variable) (string, error) {
	var s string
	if err := json.Unmarshal(v.Query, &s); err == nil {
		return s, nil
	}
	var o struct {
		Query string `json:"query"`
	}
	if err := json.Unmarshal(v.Query, &o); err != nil {
		return "", fmt.Errorf("variable %s: query is neither a string nor an object with a query: %s", v.Name, v.Query)
	}
	return o.Query, nil
}

var (
	labelValuesQuery = regexp.MustCompile(`^\s*label_values\(\s*(.*?)\s*,\s*([a-zA-Z_][a-zA-Z0-9_]*)\s*\)\s*$`)
	queryResultQuery = regexp.MustCompile(`^\s*query_result\(\s*(.*)\)\s*$`)
)

// variablePromQL is the PromQL inside a Prometheus variable query:
// label_values(SELECTOR, LABEL)'s selector (label_values(LABEL), over
// every series, is refused: the variable must list hotplugd's nodes), or
// query_result(EXPR)'s expression.
func variablePromQL(q string) (string, error) {
	if m := labelValuesQuery.FindStringSubmatch(q); m != nil {
		return m[1], nil
	}
	if m := queryResultQuery.FindStringSubmatch(q); m != nil {
		return m[1], nil
	}
	return "", fmt.Errorf("%q: want label_values(<hotplugd metric>, <label>) or query_result(<expr>)", q)
}

// queries returns every PromQL expression of a dashboard: the panels'
// targets, collapsed rows' included, and the query variables'.
func queries(d dashboard) ([]query, []string) {
	var qs []query
	var problems []string
	for _, p := range allPanels(d.Panels) {
		for _, tg := range p.Targets {
			if strings.TrimSpace(tg.Expr) == "" {
				problems = append(problems, fmt.Sprintf("panel %d %q target %s: no expr", p.ID, p.Title, tg.RefID))
				continue
			}
			qs = append(qs, query{fmt.Sprintf("panel %d %q target %s", p.ID, p.Title, tg.RefID), tg.Expr})
		}
	}
	for _, v := range d.Templating.List {
		if v.Type != "query" {
			continue
		}
		q, err := variableQuery(v)
		if err == nil {
			q, err = variablePromQL(q)
		}
		if err != nil {
			problems = append(problems, fmt.Sprintf("variable %s: %v", v.Name, err))
			continue
		}
		qs = append(qs, query{"variable " + v.Name, q})
	}
	return qs, problems
}

// Grafana's variables, replaced by values PromQL accepts.
var (
	// $node (${node}, ${node:regex}, ...) inside a regex matcher: what the
	// variable's "All" is.
	nodeRegexVar = regexp.MustCompile(`(=~|!~)\s*"\$(node|\{node(:[a-z]+)?\})"`)
	nodeVar      = regexp.MustCompile(`\$(node\b|\{node(:[a-z]+)?\})`)
	intervalVars = strings.NewReplacer(
		"$__rate_interval", "4m", "${__rate_interval}", "4m",
		"$__interval_ms", "60000", "${__interval_ms}", "60000",
		"$__interval", "1m", "${__interval}", "1m",
		"$__range_s", "21600", "${__range_s}", "21600",
		"$__range_ms", "21600000", "${__range_ms}", "21600000",
		"$__range", "6h", "${__range}", "6h",
	)
)

// substitute replaces the dashboard's Grafana variables in expr with valid
// values; a variable it does not know stays, and is a problem.
func substitute(expr string) (string, error) {
	s := nodeRegexVar.ReplaceAllString(expr, `$1".+"`)
	s = nodeVar.ReplaceAllString(s, "node-1")
	s = intervalVars.Replace(s)
	if i := strings.Index(s, "$"); i >= 0 && !inStringAt(s, i) {
		return "", fmt.Errorf("a Grafana variable the check does not know at %q", s[i:])
	}
	return s, nil
}

// inStringAt says whether byte i of a PromQL expression is inside a string
// literal (where "$1" of label_replace is no variable).
func inStringAt(s string, i int) bool {
	var quote byte
	for j := 0; j < i; j++ {
		switch c := s[j]; {
		case quote != 0 && c == '\\' && quote != '`':
			j++
		case quote != 0 && c == quote:
			quote = 0
		case quote == 0 && (c == '"' || c == '\'' || c == '`'):
			quote = c
		}
	}
	return quote != 0
}

// promtoolCheck writes the expressions as recording rules of one group
// into a temporary rules file and runs `promtool check rules` on it.
func promtoolCheck(t *testing.T, promtool string, qs []query) error {
	t.Helper()
	type rule struct {
		Record string `json:"record"`
		Expr   string `json:"expr"`
	}
	var rules []rule
	var errs []string
	for i, q := range qs {
		expr, err := substitute(q.expr)
		if err != nil {
			errs = append(errs, fmt.Sprintf("%s: %v", q.where, err))
			continue
		}
		rules = append(rules, rule{Record: fmt.Sprintf("dashboard:query_%d", i), Expr: expr})
	}
	if len(errs) > 0 {
		return fmt.Errorf("%s", strings.Join(errs, "\n"))
	}
	b, err := yaml.Marshal(map[string]any{"groups": []map[string]any{{"name": "dashboard", "rules": rules}}})
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "dashboard.rules.yaml")
	if err := os.WriteFile(file, b, 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(promtool, "check", "rules", file).CombinedOutput()
	if err != nil {
		// promtool names a rule by its record: say which query it is.
		text := string(out)
		for i, q := range qs {
			name := fmt.Sprintf("%q", fmt.Sprintf("dashboard:query_%d", i))
			text = strings.ReplaceAll(text, name, name+" ("+q.where+")")
		}
		return fmt.Errorf("promtool check rules: %v\n%s", err, text)
	}
	return nil
}

// selector is a vector selector of a PromQL expression: its metric name
// and the text between its braces.
type selector struct{ name, matchers string }

// PromQL's keywords, which are no metric names (an aggregation's, a
// binary operator's, a modifier's; inf and nan are numbers).
var (
	keywords = []string{
		"and", "or", "unless", "atan2", "bool", "offset",
		"sum", "avg", "count", "min", "max", "group", "stddev", "stdvar", "topk", "bottomk",
		"count_values", "quantile", "limitk", "limit_ratio", "inf", "nan",
	}
	// labelListKeywords are followed by a list of label names in ().
	labelListKeywords = []string{"by", "without", "on", "ignoring", "group_left", "group_right"}
)

// selectors tokenizes a PromQL expression just enough to find its vector
// selectors: identifiers that are not keywords nor function names (an
// identifier followed by "("), with the {...} after them; label names in
// by/without/on/ignoring/group_left/group_right (...), string literals,
// numbers and durations, [...] ranges, Grafana variables ($x, ${x}) and
// comments are skipped. A selector without a name is named by its
// __name__="..." matcher; one it cannot name is an error.
func selectors(expr string) ([]selector, error) {
	var out []selector
	s := expr
	for i := 0; i < len(s); {
		c := s[i]
		switch {
		case c == '#':
			for i < len(s) && s[i] != '\n' {
				i++
			}
		case c == '"' || c == '\'' || c == '`':
			end, err := stringEnd(s, i)
			if err != nil {
				return nil, err
			}
			i = end
		case c == '$':
			i++
			if i < len(s) && s[i] == '{' {
				for i < len(s) && s[i] != '}' {
					i++
				}
				i++
			} else {
				for i < len(s) && isIdentChar(s[i]) {
					i++
				}
			}
		case c == '[':
			end, err := closing(s, i, '[', ']')
			if err != nil {
				return nil, err
			}
			i = end
		case c == '{':
			end, err := closing(s, i, '{', '}')
			if err != nil {
				return nil, err
			}
			m := s[i+1 : end-1]
			name, err := nameMatcher(m)
			if err != nil {
				return nil, err
			}
			if name == "" {
				return nil, fmt.Errorf("selector {%s} has no metric name", m)
			}
			out = append(out, selector{name, m})
			i = end
		case isDigit(c) || (c == '.' && i+1 < len(s) && isDigit(s[i+1])):
			// A number or a duration: 1, 0x1F, 1.5e-3, .5, 1h30m, 5m.
			j := i + 1
			for j < len(s) && (isIdentChar(s[j]) || s[j] == '.' ||
				((s[j] == '+' || s[j] == '-') && (s[j-1] == 'e' || s[j-1] == 'E') && !strings.HasPrefix(s[i:], "0x"))) {
				j++
			}
			i = j
		case isIdentStart(c):
			j := i + 1
			for j < len(s) && isIdentChar(s[j]) {
				j++
			}
			ident := s[i:j]
			k := j
			for k < len(s) && (s[k] == ' ' || s[k] == '\t' || s[k] == '\n' || s[k] == '\r') {
				k++
			}
			next := byte(0)
			if k < len(s) {
				next = s[k]
			}
			lower := strings.ToLower(ident)
			switch {
			case slices.Contains(labelListKeywords, lower):
				i = j
				if next == '(' {
					end, err := closing(s, k, '(', ')')
					if err != nil {
						return nil, err
					}
					i = end
				}
			case slices.Contains(keywords, lower), next == '(':
				i = j
			default:
				sel := selector{name: ident}
				i = j
				if next == '{' {
					end, err := closing(s, k, '{', '}')
					if err != nil {
						return nil, err
					}
					sel.matchers = s[k+1 : end-1]
					if name, err := nameMatcher(sel.matchers); err != nil {
						return nil, err
					} else if name != "" {
						return nil, fmt.Errorf("%s{%s}: a name and a __name__ matcher", ident, sel.matchers)
					}
					i = end
				}
				out = append(out, sel)
			}
		default:
			i++
		}
	}
	return out, nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }

// isIdentStart: c may start a metric or function name (a recording rule's
// name has colons).
func isIdentStart(c byte) bool {
	return c == '_' || c == ':' || ('a' <= c && c <= 'z') || ('A' <= c && c <= 'Z')
}

func isIdentChar(c byte) bool { return isIdentStart(c) || isDigit(c) }

// stringEnd is the index after the string literal that starts at i.
func stringEnd(s string, i int) (int, error) {
	q := s[i]
	for j := i + 1; j < len(s); j++ {
		switch {
		case s[j] == '\\' && q != '`':
			j++
		case s[j] == q:
			return j + 1, nil
		}
	}
	return 0, fmt.Errorf("unterminated string in %q", s[i:])
}

// closing is the index after the bracket that closes the one at i,
// skipping string literals and nested pairs.
func closing(s string, i int, open, close byte) (int, error) {
	depth := 0
	for j := i; j < len(s); j++ {
		switch s[j] {
		case '"', '\'', '`':
			end, err := stringEnd(s, j)
			if err != nil {
				return 0, err
			}
			j = end - 1
		case open:
			depth++
		case close:
			depth--
			if depth == 0 {
				return j + 1, nil
			}
		}
	}
	return 0, fmt.Errorf("no %c closing %q", close, s[i:])
}

// matcher is one label matcher of a selector.
type matcher struct{ label, op, value string }

var matcherHead = regexp.MustCompile(`^\s*([a-zA-Z_][a-zA-Z0-9_]*|"[^"]*")\s*(=~|!~|!=|=)\s*`)

// matchers splits the text between a selector's braces.
func matchers(text string) ([]matcher, error) {
	var out []matcher
	rest := text
	for strings.TrimSpace(rest) != "" {
		m := matcherHead.FindStringSubmatch(rest)
		if m == nil {
			return nil, fmt.Errorf("cannot read the matcher %q", rest)
		}
		rest = rest[len(m[0]):]
		if rest == "" || (rest[0] != '"' && rest[0] != '\'' && rest[0] != '`') {
			return nil, fmt.Errorf("matcher %s%s: no string value", m[1], m[2])
		}
		end, err := stringEnd(rest, 0)
		if err != nil {
			return nil, err
		}
		out = append(out, matcher{strings.Trim(m[1], `"`), m[2], rest[1 : end-1]})
		rest = strings.TrimLeft(rest[end:], " \t\n")
		if rest != "" && rest[0] == ',' {
			rest = rest[1:]
		}
	}
	return out, nil
}

// nameMatcher is the metric a selector's __name__="..." matcher names, or
// "" without one; a __name__ matched otherwise is an error (the check
// could not say which metrics it selects).
func nameMatcher(text string) (string, error) {
	ms, err := matchers(text)
	if err != nil {
		return "", err
	}
	for _, m := range ms {
		if m.label == "__name__" {
			if m.op != "=" {
				return "", fmt.Errorf("__name__%s%q: the check needs the metric's name", m.op, m.value)
			}
			return m.value, nil
		}
	}
	return "", nil
}

// exported finds the metric of the inventory a series name belongs to:
// itself, or a classic histogram's _bucket, _sum and _count (a summary's
// _sum and _count).
func exported(inv map[string]metricsref.Metric, name string) (metricsref.Metric, bool) {
	if m, ok := inv[name]; ok && m.Type != "histogram" {
		return m, true
	}
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		base, ok := strings.CutSuffix(name, suffix)
		if m, found := inv[base]; ok && found && (m.Type == "histogram" || (m.Type == "summary" && suffix != "_bucket")) {
			return m, true
		}
	}
	return metricsref.Metric{}, false
}

// checkSeries checks that every series a query selects is one hotplugd
// exports, with labels it has, and filtered by the node variable.
func checkSeries(qs []query, inv map[string]metricsref.Metric) []string {
	var problems []string
	for _, q := range qs {
		sels, err := selectors(q.expr)
		if err != nil {
			problems = append(problems, fmt.Sprintf("%s: %v", q.where, err))
			continue
		}
		if len(sels) == 0 {
			problems = append(problems, fmt.Sprintf("%s: selects no series: %s", q.where, q.expr))
		}
		for _, s := range sels {
			m, ok := exported(inv, s.name)
			if !ok {
				problems = append(problems, fmt.Sprintf("%s: %s is not a metric hotplugd exports (docs/metrics.md)", q.where, s.name))
				continue
			}
			ms, err := matchers(s.matchers)
			if err != nil {
				problems = append(problems, fmt.Sprintf("%s: %s: %v", q.where, s.name, err))
				continue
			}
			for _, mt := range ms {
				if mt.label != "__name__" && !slices.Contains(m.Labels, mt.label) && !slices.Contains(targetLabels, mt.label) &&
					(mt.label != "le" || !strings.HasSuffix(s.name, "_bucket")) && (mt.label != "quantile" || m.Type != "summary") {
					problems = append(problems, fmt.Sprintf("%s: %s has no label %s (it has %q, and the scrape's %q)", q.where, s.name, mt.label, m.Labels, targetLabels))
				}
			}
			if !strings.HasPrefix(q.where, "variable ") && !strings.Contains(s.matchers, nodeFilter) {
				problems = append(problems, fmt.Sprintf("%s: %s{%s} does not filter on the node variable (%s)", q.where, s.name, s.matchers, nodeFilter))
			}
		}
	}
	return problems
}

// rangeWindow is a range or a subquery's window.
var rangeWindow = regexp.MustCompile(`\[([^\]:]*)(:[^\]]*)?\]`)

// checkConventions checks the rest of what an imported dashboard needs: a
// recent schema, a Prometheus data source variable every panel and query
// uses, a node variable from a hotplugd metric, unique panel ids, and
// ranges of $__rate_interval (or $__range for totals over the dashboard's
// time range) rather than fixed windows.
func checkConventions(d dashboard, qs []query) []string {
	var problems []string
	if d.SchemaVersion < 39 {
		problems = append(problems, fmt.Sprintf("schemaVersion %d: want 39 (Grafana 11) or later", d.SchemaVersion))
	}
	if d.UID == "" || d.Title == "" {
		problems = append(problems, "no uid or title")
	}
	vars := map[string]variable{}
	for _, v := range d.Templating.List {
		vars[v.Name] = v
	}
	if v, ok := vars["datasource"]; !ok || v.Type != "datasource" || string(v.Query) != `"prometheus"` {
		problems = append(problems, `no variable "datasource" of type datasource with query "prometheus"`)
	}
	if v, ok := vars["node"]; !ok || v.Type != "query" {
		problems = append(problems, `no query variable "node"`)
	} else if q, err := variableQuery(v); err != nil || !labelValuesQuery.MatchString(q) || labelValuesQuery.FindStringSubmatch(q)[2] != "node" {
		problems = append(problems, fmt.Sprintf("variable node: query %q, want label_values(<hotplugd metric>, node)", q))
	}
	const ds = `{"type":"prometheus","uid":"${datasource}"}`
	compact := func(raw json.RawMessage) string {
		var v any
		if json.Unmarshal(raw, &v) != nil {
			return string(raw)
		}
		b, _ := json.Marshal(v)
		return string(b)
	}
	if v, ok := vars["node"]; ok && compact(v.Datasource) != ds {
		problems = append(problems, fmt.Sprintf("variable node: datasource %s, want %s", v.Datasource, ds))
	}
	ids := map[int]string{}
	for _, p := range allPanels(d.Panels) {
		if other, dup := ids[p.ID]; dup || p.ID == 0 {
			problems = append(problems, fmt.Sprintf("panel %q: id %d, also %q's (or 0)", p.Title, p.ID, other))
		}
		ids[p.ID] = p.Title
		if p.Type == "row" {
			continue
		}
		if compact(p.Datasource) != ds {
			problems = append(problems, fmt.Sprintf("panel %d %q: datasource %s, want %s", p.ID, p.Title, p.Datasource, ds))
		}
		if len(p.Targets) == 0 {
			problems = append(problems, fmt.Sprintf("panel %d %q: no query", p.ID, p.Title))
		}
		refs := map[string]bool{}
		for _, tg := range p.Targets {
			if refs[tg.RefID] || tg.RefID == "" {
				problems = append(problems, fmt.Sprintf("panel %d %q: refId %q twice (or empty)", p.ID, p.Title, tg.RefID))
			}
			refs[tg.RefID] = true
			if compact(tg.Datasource) != ds {
				problems = append(problems, fmt.Sprintf("panel %d %q target %s: datasource %s, want %s", p.ID, p.Title, tg.RefID, tg.Datasource, ds))
			}
		}
	}
	for _, q := range qs {
		for _, m := range rangeWindow.FindAllStringSubmatch(q.expr, -1) {
			if w := strings.TrimSpace(m[1]); w != "$__rate_interval" && w != "$__range" {
				problems = append(problems, fmt.Sprintf("%s: range [%s]: use $__rate_interval (or $__range for the dashboard's time range)", q.where, m[1]))
			}
		}
	}
	return problems
}

// inventory is the metrics hotplugd exports, by name.
func inventory(t *testing.T) map[string]metricsref.Metric {
	t.Helper()
	ms, err := metricsref.Inventory()
	if err != nil {
		t.Fatal(err)
	}
	inv := map[string]metricsref.Metric{}
	for _, m := range ms {
		inv[m.Name] = m
	}
	return inv
}

// checkDashboard runs every check on a dashboard's JSON and returns the
// problems found; promtool "" skips `promtool check rules`.
func checkDashboard(t *testing.T, b []byte, promtool string, inv map[string]metricsref.Metric) (problems []string, n int) {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(b, &d); err != nil {
		return []string{fmt.Sprintf("not a dashboard's JSON: %v", err)}, 0
	}
	qs, problems := queries(d)
	problems = append(problems, checkConventions(d, qs)...)
	problems = append(problems, checkSeries(qs, inv)...)
	if promtool != "" {
		if err := promtoolCheck(t, promtool, qs); err != nil {
			problems = append(problems, err.Error())
		}
	}
	return problems, len(qs)
}

// TestGrafanaDashboard: every query of deploy/grafana/hotplugd.json (the
// panels', collapsed rows' included, and the node variable's) parses with
// the real promtool once Grafana's variables are replaced, names only
// metrics hotplugd exports (metricsref.Inventory, the code's own
// registrations) with their labels, and filters on the node variable; the
// dashboard is importable anywhere (its own data source variable).
func TestGrafanaDashboard(t *testing.T) {
	promtool := promtoolTool.path(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	problems, n := checkDashboard(t, b, promtool, inventory(t))
	for _, p := range problems {
		t.Error(p)
	}
	if n < 20 {
		t.Errorf("%d queries: not the dashboard", n)
	}
	t.Logf("%d queries checked", n)
}

// TestGrafanaDashboardCheckFails: the dashboard with one query broken each
// way fails the checks, saying where: a metric hotplugd does not export
// (in a collapsed row), a syntax error (promtool), a fixed range, a
// selector without the node filter, a label the metric lacks, a variable
// over every series.
func TestGrafanaDashboardCheckFails(t *testing.T) {
	promtool := promtoolTool.path(t)
	b, err := os.ReadFile(dashboardFile)
	if err != nil {
		t.Fatal(err)
	}
	inv := inventory(t)
	const (
		good  = `sum by (trigger) (rate(hotplugd_reconciles_total{node=~\"$node\"}[$__rate_interval]))`
		goodV = `"query": "label_values(hotplugd_build_info, node)"`
	)
	if !strings.Contains(string(b), good) || !strings.Contains(string(b), goodV) {
		t.Fatalf("the dashboard no longer has the queries this test breaks:\n%s\n%s", good, goodV)
	}
	for _, tt := range []struct {
		name, from, to, want string
	}{
		{"bogus metric", good, `sum by (trigger) (rate(hotplugd_reconcile_total{node=~\"$node\"}[$__rate_interval]))`,
			`hotplugd_reconcile_total is not a metric hotplugd exports`},
		{"not hotplugd's", good, `sum(up{node=~\"$node\"})`, `up is not a metric hotplugd exports`},
		{"syntax error", good, `sum by (trigger) (rate(hotplugd_reconciles_total{node=~\"$node\"}[$__rate_interval])`,
			`promtool check rules: exit status 1`},
		{"fixed range", good, `sum by (trigger) (rate(hotplugd_reconciles_total{node=~\"$node\"}[5m]))`, `range [5m]`},
		{"no node filter", good, `sum by (trigger) (rate(hotplugd_reconciles_total[$__rate_interval]))`, `does not filter on the node variable`},
		{"no such label", good, `sum(rate(hotplugd_reconciles_total{node=~\"$node\", reason=\"x\"}[$__rate_interval]))`, `has no label reason`},
		{"histogram without _bucket", good, `histogram_quantile(0.9, rate(hotplugd_reconcile_duration_seconds{node=~\"$node\"}[$__rate_interval]))`,
			`hotplugd_reconcile_duration_seconds is not a metric hotplugd exports`},
		{"unknown variable", good, `sum by (trigger) (rate(hotplugd_reconciles_total{node=~\"$node\"}[$step]))`, `a Grafana variable the check does not know`},
		{"variable over every series", goodV, `"query": "label_values(node)"`, `variable node`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			broken := strings.Replace(string(b), tt.from, tt.to, 1)
			problems, _ := checkDashboard(t, []byte(broken), promtool, inv)
			if !slices.ContainsFunc(problems, func(p string) bool { return strings.Contains(p, tt.want) }) {
				t.Errorf("no problem %q; got:\n%s", tt.want, strings.Join(problems, "\n"))
			}
		})
	}
}

func TestSelectors(t *testing.T) {
	for _, tt := range []struct {
		expr string
		want []string // name{matchers}
	}{
		{`sum by (node, resource) (rate(hotplugd_uevents_total{node=~"$node", subsystem="cpu"}[$__rate_interval]))`,
			[]string{`hotplugd_uevents_total{node=~"$node", subsystem="cpu"}`}},
		{`histogram_quantile(0.99, sum by (le) (rate(hotplugd_x_seconds_bucket{node=~"$node"}[5m])))`,
			[]string{`hotplugd_x_seconds_bucket{node=~"$node"}`}},
		// Braces, parentheses and keywords inside strings; label lists of
		// on and group_left; a name after group_left without parentheses.
		{`a * on (instance) group_left (node, version) b{x="}{ \"by(foo) rate(\" bool"} / ignoring(pod) group_right c`,
			[]string{`a{}`, `b{x="}{ \"by(foo) rate(\" bool"}`, `c{}`}},
		{`label_replace(up, "dst", "$1", "src", "(.*)")`, []string{`up{}`}},
		{`{__name__="foo_total", job="x"} + {job="y", __name__ = "bar"}`, []string{`foo_total{__name__="foo_total", job="x"}`, `bar{job="y", __name__ = "bar"}`}},
		{`count_values("version", hotplugd_build_info) offset 1h > bool Inf`, []string{`hotplugd_build_info{}`}},
		{`sum(x) without (pod) or on() vector(0)`, []string{`x{}`}},
		{"max_over_time(x[1h:5m]) unless ignoring(pod) y # a comment: z{}\n + w", []string{`x{}`, `y{}`, `w{}`}},
		{`SUM BY (node) (x) AND ON(node) Y`, []string{`x{}`, `Y{}`}},
		{`time() - x @ end() - z @ 1609746000`, []string{`x{}`, `z{}`}},
		{`1e-3 * 0x1F + .5 * x - 2E+2 * 1h30m`, []string{`x{}`}},
		{`$__range_s * rate(x[$__range]) * ${__interval_ms}`, []string{`x{}`}},
		{`topk(3, sum by (a:b) (rec:rule_total{node=~"$node"}))`, []string{`rec:rule_total{node=~"$node"}`}},
	} {
		sels, err := selectors(tt.expr)
		if err != nil {
			t.Errorf("%s: %v", tt.expr, err)
			continue
		}
		var got []string
		for _, s := range sels {
			got = append(got, s.name+"{"+s.matchers+"}")
		}
		if !slices.Equal(got, tt.want) {
			t.Errorf("%s:\n got %q\nwant %q", tt.expr, got, tt.want)
		}
	}
	for _, bad := range []string{`{job="x"}`, `{__name__=~"hotplugd_.*"}`, `x{a="b"`, `sum(x{a="b})`, `x{__name__="y"}`} {
		if sels, err := selectors(bad); err == nil {
			t.Errorf("%s: %v, want an error", bad, sels)
		}
	}
}

func TestSubstitute(t *testing.T) {
	for in, want := range map[string]string{
		`rate(x{node=~"$node"}[$__rate_interval])`:            `rate(x{node=~".+"}[4m])`,
		`x{node=~"${node}", a!~"${node:regex}"}`:              `x{node=~".+", a!~".+"}`,
		`x{node="$node"} * $__range_s / ${__interval_ms}`:     `x{node="node-1"} * 21600 / 60000`,
		`increase(x[$__range]) + y[$__interval]`:              `increase(x[6h]) + y[1m]`,
		`label_replace(x{node=~"$node"}, "a", "$1", "b", "")`: `label_replace(x{node=~".+"}, "a", "$1", "b", "")`,
	} {
		got, err := substitute(in)
		if err != nil || got != want {
			t.Errorf("substitute(%s) = %s, %v; want %s", in, got, err, want)
		}
	}
	if got, err := substitute(`x[$__auto]`); err == nil {
		t.Errorf("substitute($__auto) = %s, want an error", got)
	}
}
