package fleet

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"math"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"

	"github.com/hotplugd/hotplugd/internal/kubeapitest"
)

// The API server's metrics the test reads (everything else is dropped as
// it is parsed).
const (
	mRequests       = "apiserver_request_total"
	mDurationBucket = "apiserver_request_duration_seconds_bucket"
	mLongRunning    = "apiserver_longrunning_requests"
	mDispatched     = "apiserver_flowcontrol_dispatched_requests_total"
	mRejected       = "apiserver_flowcontrol_rejected_requests_total"
	mRSS            = "process_resident_memory_bytes"
	mCPU            = "process_cpu_seconds_total"
)

var keptMetrics = []string{mRequests, mDurationBucket, mLongRunning, mDispatched, mRejected, mRSS, mCPU}

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape is the API server's /metrics at one moment.
type scrape struct {
	at      time.Time
	samples []sample
}

// metricsClient reads the API server's own /metrics as the admin user.
type metricsClient struct {
	url string
	hc  *http.Client
}

func newMetricsClient(srv *kubeapitest.Server) (*metricsClient, error) {
	hc, err := rest.HTTPClientFor(srv.RestConfig())
	if err != nil {
		return nil, fmt.Errorf("fleet: metrics client: %w", err)
	}
	hc.Timeout = time.Minute
	return &metricsClient{url: srv.URL + "/metrics", hc: hc}, nil
}

func (m *metricsClient) scrape(ctx context.Context) (*scrape, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, m.url, nil)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	resp, err := m.hc.Do(req)
	if err != nil {
		return nil, fmt.Errorf("fleet: GET /metrics: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("fleet: GET /metrics: %s", resp.Status)
	}
	at := time.Now()
	samples, err := parseMetrics(resp.Body, keptMetrics)
	if err != nil {
		return nil, err
	}
	return &scrape{at: at, samples: samples}, nil
}

// parseMetrics parses the Prometheus text format, keeping the samples of
// the named metrics.
func parseMetrics(r io.Reader, keep []string) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		if line == "" || line[0] == '#' {
			continue
		}
		end := strings.IndexAny(line, "{ ")
		if end < 0 {
			return nil, fmt.Errorf("fleet: metrics line %q", line)
		}
		if !slices.Contains(keep, line[:end]) {
			continue
		}
		s, err := parseSample(line)
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("fleet: reading /metrics: %w", err)
	}
	return out, nil
}

// parseSample parses `name{k="v",...} value [timestamp]`.
func parseSample(line string) (sample, error) {
	bad := func(why string) (sample, error) { return sample{}, fmt.Errorf("fleet: metrics line %q: %s", line, why) }
	s := sample{labels: map[string]string{}}
	i := strings.IndexAny(line, "{ ")
	s.name = line[:i]
	rest := line[i:]
	if rest[0] == '{' {
		rest = rest[1:]
		for {
			rest = strings.TrimLeft(rest, ", ")
			if rest == "" {
				return bad("unterminated labels")
			}
			if rest[0] == '}' {
				rest = rest[1:]
				break
			}
			eq := strings.Index(rest, `="`)
			if eq < 0 {
				return bad("label without a value")
			}
			key := rest[:eq]
			rest = rest[eq+2:]
			var v strings.Builder
			closed := false
			for j := 0; j < len(rest); j++ {
				c := rest[j]
				if c == '\\' && j+1 < len(rest) {
					j++
					switch rest[j] {
					case 'n':
						v.WriteByte('\n')
					default:
						v.WriteByte(rest[j])
					}
					continue
				}
				if c == '"' {
					rest, closed = rest[j+1:], true
					break
				}
				v.WriteByte(c)
			}
			if !closed {
				return bad("unterminated label value")
			}
			s.labels[key] = v.String()
		}
	}
	f := strings.Fields(rest)
	if len(f) == 0 {
		return bad("no value")
	}
	v, err := strconv.ParseFloat(f[0], 64)
	if err != nil {
		return bad(err.Error())
	}
	s.value = v
	return s, nil
}

// labelMatch selects samples by their labels; nil selects all.
type labelMatch func(map[string]string) bool

// sum is the sum of the named metric's samples that match.
func (s *scrape) sum(name string, match labelMatch) float64 {
	var v float64
	for _, x := range s.samples {
		if x.name == name && (match == nil || match(x.labels)) {
			v += x.value
		}
	}
	return v
}

// by sums the named metric's matching samples by the value of one label.
func (s *scrape) by(name, label string, match labelMatch) map[string]float64 {
	out := map[string]float64{}
	for _, x := range s.samples {
		if x.name == name && (match == nil || match(x.labels)) {
			out[x.labels[label]] += x.value
		}
	}
	return out
}

// window is what changed between two scrapes.
type window struct {
	a, b *scrape
}

func (w window) seconds() float64 { return w.b.at.Sub(w.a.at).Seconds() }

// delta is the increase of a counter over the window.
func (w window) delta(name string, match labelMatch) float64 {
	return w.b.sum(name, match) - w.a.sum(name, match)
}

// deltaBy is delta by the value of one label.
func (w window) deltaBy(name, label string, match labelMatch) map[string]float64 {
	out := w.b.by(name, label, match)
	for k, v := range w.a.by(name, label, match) {
		out[k] -= v
	}
	for k, v := range out {
		if v == 0 {
			delete(out, k)
		}
	}
	return out
}

// mutating matches the request metrics of the verbs that change objects,
// as the Kubernetes scalability SLO counts them.
func mutating(l map[string]string) bool {
	switch l["verb"] {
	case "POST", "PUT", "PATCH", "DELETE", "APPLY":
		return true
	}
	return false
}

// quantile is the q-quantile of the requests that match, from the deltas
// of apiserver_request_duration_seconds_bucket over the window: the upper
// bound of the histogram bucket the quantile falls in (the histogram says
// no more), and how many requests there were.
func (w window) quantile(q float64, match labelMatch) (bound, count float64) {
	buckets := map[float64]float64{}
	for _, sc := range []struct {
		s    *scrape
		sign float64
	}{{w.b, 1}, {w.a, -1}} {
		for _, x := range sc.s.samples {
			if x.name != mDurationBucket || (match != nil && !match(x.labels)) {
				continue
			}
			le, err := strconv.ParseFloat(x.labels["le"], 64)
			if err != nil {
				continue
			}
			buckets[le] += sc.sign * x.value
		}
	}
	les := make([]float64, 0, len(buckets))
	for le := range buckets {
		les = append(les, le)
	}
	slices.Sort(les)
	if len(les) == 0 {
		return 0, 0
	}
	count = buckets[les[len(les)-1]] // +Inf: every request
	if count <= 0 {
		return 0, 0
	}
	for _, le := range les {
		if buckets[le] >= q*count {
			return le, count
		}
	}
	return math.Inf(1), count
}

// seriesKey names a request series by verb, resource and subresource.
func seriesKey(l map[string]string) string {
	k := l["verb"] + " " + l["resource"]
	if l["subresource"] != "" {
		k += "/" + l["subresource"]
	}
	return k
}

// worstQuantile is the series (verb and resource) among those that match,
// with at least minCount requests in the window, whose q-quantile bucket
// bound is highest.
func (w window) worstQuantile(q float64, minCount float64, match labelMatch) (series string, bound, count float64) {
	keys := map[string]bool{}
	for _, x := range w.b.samples {
		if x.name == mDurationBucket && (match == nil || match(x.labels)) {
			keys[seriesKey(x.labels)] = true
		}
	}
	for k := range keys {
		b, c := w.quantile(q, func(l map[string]string) bool { return (match == nil || match(l)) && seriesKey(l) == k })
		if c >= minCount && (b > bound || (b == bound && c > count)) {
			series, bound, count = k, b, c
		}
	}
	return series, bound, count
}
