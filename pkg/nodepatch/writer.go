package nodepatch

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/kubeclient"
)

// WriterOptions configure a Writer.
type WriterOptions struct {
	Client   kubeclient.Interface
	NodeName string
	// DryRun logs what would be written and writes nothing.
	DryRun bool
	Log    *zap.Logger
	// Recorder sends Events; nil: one that sends them to the API server
	// as component hotplugd, as client-go's event recorder does.
	Recorder EventRecorder
	// Registerer gets the writer's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// RequestTimeout bounds one request (default 10s).
	RequestTimeout time.Duration
	// Heartbeat is the condition's heartbeat interval, published as
	// hotplugd_heartbeat_interval_seconds (0: none).
	Heartbeat time.Duration
}

// Writer executes the Node's half of a plan: one status patch, Events. It
// decides nothing: what to write and when to retry come from the plan.
type Writer struct {
	o        WriterOptions
	log      *zap.Logger
	recorder EventRecorder
	events   *eventSender // nil when o.Recorder was given
	ref      *v1.ObjectReference
	metrics  struct {
		stale, heartbeat prometheus.Gauge
		writes           *prometheus.CounterVec
		errors           prometheus.Counter
	}
	dryRunLast string
}

// NewWriter returns a Writer; nothing is requested before a write.
func NewWriter(o WriterOptions) (*Writer, error) {
	if o.Client == nil || o.NodeName == "" {
		return nil, errors.New("nodepatch: a client and a node name are required")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	w := &Writer{
		o:   o,
		log: o.Log.Named("nodepatch"),
		// The kubelet names its Node in Events with the node name as UID;
		// kubectl describe node looks them up that way.
		ref: &v1.ObjectReference{Kind: "Node", Name: o.NodeName, UID: types.UID(o.NodeName)},
	}
	w.metrics.stale = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "hotplugd_kubelet_capacity_stale",
		Help: "1 while the kubelet reports cpu, memory or hugepages that differ from the machine's (the KubeletCapacityStale condition), else 0.",
	})
	w.metrics.heartbeat = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "hotplugd_condition_heartbeat_timestamp_seconds",
		Help: "The lastHeartbeatTime of the KubeletCapacityStale condition on the Node, as last written or seen (0 before the Node is seen with it); it moves at least every --heartbeat-interval while hotplugd can write its Node.",
	})
	interval := prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "hotplugd_heartbeat_interval_seconds",
		Help: "--heartbeat-interval: the condition's lastHeartbeatTime moves at least this often while hotplugd runs and can write its Node (0: only on a change).",
	})
	interval.Set(o.Heartbeat.Seconds())
	w.metrics.writes = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "hotplugd_node_writes_total",
		Help: "Writes to the Node that succeeded, by what was written: status (one nodes/status patch with the condition and the annotations), event.",
	}, []string{"what"})
	w.metrics.errors = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "hotplugd_node_write_errors_total",
		Help: "Failed writes to the Node; each is retried with backoff.",
	})
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{w.metrics.stale, w.metrics.heartbeat, interval, w.metrics.writes, w.metrics.errors} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("nodepatch: %w", err)
			}
		}
	}
	w.recorder = o.Recorder
	if w.recorder == nil {
		w.events = newEventSender(o.Client.CoreV1().Events(""), v1.EventSource{Component: "hotplugd", Host: o.NodeName},
			w.log, clock.RealClock{})
		w.events.timeout = w.o.RequestTimeout
		w.recorder = w.events
	}
	return w, nil
}

// Run sends the Events until ctx is done.
func (w *Writer) Run(ctx context.Context) error {
	if w.events == nil {
		<-ctx.Done()
		return nil
	}
	w.events.Run(ctx)
	return nil
}

// Patch sends one strategic-merge patch of the Node's status and returns
// the Node it answered with (nil, nil in a dry run: logged instead).
func (w *Writer) Patch(ctx context.Context, data []byte, cond v1.NodeCondition) (*v1.Node, error) {
	if w.o.DryRun {
		if line := string(data); line != w.dryRunLast {
			w.dryRunLast = line
			w.log.Info("dry run: would patch the node", zap.ByteString("patch", data))
		}
		return nil, nil
	}
	ctx, cancel := context.WithTimeout(ctx, w.o.RequestTimeout)
	defer cancel()
	n, err := w.o.Client.CoreV1().Nodes().Patch(ctx, w.o.NodeName, types.StrategicMergePatchType, data,
		metav1.PatchOptions{FieldManager: "hotplugd"}, "status")
	if err != nil {
		w.metrics.errors.Inc()
		return nil, fmt.Errorf("nodepatch: patch node %s status: %w", w.o.NodeName, err)
	}
	w.metrics.writes.WithLabelValues("status").Inc()
	w.log.Info("node written", zap.String("condition", string(cond.Type)), zap.String("status", string(cond.Status)),
		zap.String("reason", cond.Reason), zap.String("message", cond.Message), zap.ByteString("patch", data))
	return n, nil
}

// Event sends an Event on the Node (logged instead in a dry run).
func (w *Writer) Event(e Event) {
	if w.o.DryRun {
		w.log.Info("dry run: would send event", zap.String("type", e.Type), zap.String("reason", e.Reason), zap.String("message", e.Message))
		return
	}
	if e.Reason == ReasonCapacityDrift {
		w.log.Warn("the kubelet reports stale capacity", zap.String("node", w.o.NodeName), zap.String("drift", e.Message))
	}
	w.recorder.Event(w.ref, e.Type, e.Reason, e.Message)
	w.metrics.writes.WithLabelValues("event").Inc()
}

// SetStale sets the stale gauge.
func (w *Writer) SetStale(stale bool) {
	if stale {
		w.metrics.stale.Set(1)
	} else {
		w.metrics.stale.Set(0)
	}
}

// SetHeartbeat sets hotplugd_condition_heartbeat_timestamp_seconds.
func (w *Writer) SetHeartbeat(t time.Time) {
	w.metrics.heartbeat.Set(float64(t.Unix()))
}

// Backoff is the wait before retrying writes that failed: RetryMin doubled
// per failure in a row, capped at RetryMax (client-go workqueue's
// exponential per-item rate limiter, reset on success); for a write refused
// for good (RefusedForGood), RetryMax doubled per such failure up to
// RefusedMax. Minus up to 20% jitter, so that many nodes coming back
// together do not write in step.
type Backoff struct {
	retry, refused workqueue.TypedRateLimiter[string]
	// Failures counts the failures in a row.
	Failures int
}

// NewBackoff returns a Backoff; zero values get the defaults 200ms, 4s
// and 5m.
func NewBackoff(lo, hi, refusedHi time.Duration) *Backoff {
	if lo <= 0 {
		lo = 200 * time.Millisecond
	}
	if hi < lo {
		hi = max(4*time.Second, lo)
	}
	if refusedHi < hi {
		refusedHi = max(5*time.Minute, hi)
	}
	return &Backoff{
		retry:   workqueue.NewTypedItemExponentialFailureRateLimiter[string](lo, hi),
		refused: workqueue.NewTypedItemExponentialFailureRateLimiter[string](hi, refusedHi),
	}
}

// Failed counts a failure with err and returns the wait before the next
// try.
func (b *Backoff) Failed(err error) time.Duration {
	b.Failures++
	d := b.retry.When("node")
	if RefusedForGood(err) {
		d = b.refused.When("node")
	}
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// Succeeded resets the backoff.
func (b *Backoff) Succeeded() {
	b.Failures = 0
	b.retry.Forget("node")
	b.refused.Forget("node")
}

// RefusedForGood says whether the API server refused a write in a way a
// retry in seconds does not change: forbidden, unauthorized, not found,
// bad or invalid. Conflicts, throttling, timeouts and server errors are
// not: they pass.
func RefusedForGood(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err)
}
