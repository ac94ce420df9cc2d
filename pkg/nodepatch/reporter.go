package nodepatch

import (
	"context"
	"errors"
	"fmt"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"math/rand/v2"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/journal"
)

// Options configure a Reporter.
type Options struct {
	Client   kubernetes.Interface
	NodeName string
	// MinMemoryDelta is the smallest memory difference that is drift.
	MinMemoryDelta resource.Quantity
	// DryRun logs what would be written and writes nothing.
	DryRun bool
	Log    *zap.Logger
	Clock  clock.WithTicker // nil: the real clock
	// Recorder sends Events; nil: one that sends them to the API server
	// as component hotplugd.
	Recorder record.EventRecorder
	// Registerer gets the reporter's metrics; nil: not registered.
	Registerer prometheus.Registerer
	// RetryMin and RetryMax bound the backoff between failed writes
	// (defaults 200ms and 4s); each wait has up to 20% jitter.
	RetryMin, RetryMax time.Duration
	// RefusedRetryMax bounds the backoff after writes the API server
	// refuses for good (403, 401, 404, 400, 422: RBAC, a deleted Node, an
	// admission policy), which waiting seconds does not change: from
	// RetryMax up to this (default 5m), so a misconfigured node does not
	// write every few seconds for ever.
	RefusedRetryMax time.Duration
	// RequestTimeout bounds one request (default 10s).
	RequestTimeout time.Duration
	// Journal is the remedy's record (pkg/journal), read like a source: a
	// restart under way holds the writes (the restarting kubelet's
	// intermediate reports are not drifts), each new entry is an Event, and
	// the last entry for the current prediction's key is the condition's
	// note while the drift lasts. Nil: no remedy.
	Journal *journal.Journal
}

// State is what the reporter knows now.
type State struct {
	// Node is the latest Node seen, nil until the kubelet registered it.
	Node *v1.Node
	// Prediction is nil until the daemon's first snapshot.
	Prediction *Prediction
	// Drift is how the Node differs from the prediction (noise included).
	Drift Drift
}

// Known reports whether both sides are known, so Drift means something.
func (s State) Known() bool { return s.Node != nil && s.Prediction != nil }

// Reporter keeps the Node's condition, annotations and Events in line with
// the drift. Create it with New, feed it with SetPrediction, run it with Run.
type Reporter struct {
	o        Options
	log      *zap.Logger
	clock    clock.WithTicker
	informer cache.SharedIndexInformer
	recorder record.EventRecorder
	events   record.EventBroadcaster // nil when o.Recorder was given
	ref      *v1.ObjectReference
	metrics  reporterMetrics

	wake  chan struct{}
	retry workqueue.TypedRateLimiter[string]
	// refused is the backoff after writes refused for good (refusedForGood).
	refused workqueue.TypedRateLimiter[string]

	mu         sync.Mutex
	prediction *Prediction
	// journaled is the last journal entry sent as an Event.
	journaled  int64
	patched    *v1.Node // the Node our last patch returned
	state      State
	changed    chan struct{} // closed and replaced when state changes
	evented    string        // the drift message last sent as an Event
	started    bool          // evented was initialised from the Node
	noise      string        // the noise last logged
	dryRunLast string
	// holdUntil: a drift is compared and published but not written before
	// it (HoldUntil).
	holdUntil time.Time
}

type reporterMetrics struct {
	stale  prometheus.Gauge
	writes *prometheus.CounterVec
	errors prometheus.Counter
}

// New creates a Reporter; nothing is requested before Run.
func New(o Options) (*Reporter, error) {
	if o.Client == nil || o.NodeName == "" {
		return nil, errors.New("nodepatch: a client and a node name are required")
	}
	if o.Log == nil {
		o.Log = zap.NewNop()
	}
	if o.Clock == nil {
		o.Clock = clock.RealClock{}
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 200 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(4*time.Second, o.RetryMin)
	}
	if o.RequestTimeout <= 0 {
		o.RequestTimeout = 10 * time.Second
	}
	if o.RefusedRetryMax < o.RetryMax {
		o.RefusedRetryMax = max(5*time.Minute, o.RetryMax)
	}
	r := &Reporter{
		o:       o,
		log:     o.Log.Named("nodepatch"),
		clock:   o.Clock,
		wake:    make(chan struct{}, 1),
		retry:   workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.RetryMin, o.RetryMax),
		refused: workqueue.NewTypedItemExponentialFailureRateLimiter[string](o.RetryMax, o.RefusedRetryMax),
		changed: make(chan struct{}),
		// The kubelet names its Node in Events with the node name as UID;
		// kubectl describe node looks them up that way.
		ref: &v1.ObjectReference{Kind: "Node", Name: o.NodeName, UID: types.UID(o.NodeName)},
		metrics: reporterMetrics{
			stale: prometheus.NewGauge(prometheus.GaugeOpts{
				Name: "hotplugd_kubelet_capacity_stale",
				Help: "1 while the kubelet reports cpu, memory or hugepages that differ from this machine's (the KubeletCapacityStale condition), else 0.",
			}),
			writes: prometheus.NewCounterVec(prometheus.CounterOpts{
				Name: "hotplugd_node_writes_total",
				Help: "Writes to the Node that succeeded, by what was written: status (one nodes/status patch with the condition and the annotations), event.",
			}, []string{"what"}),
			errors: prometheus.NewCounter(prometheus.CounterOpts{
				Name: "hotplugd_node_write_errors_total",
				Help: "Failed writes to the Node; each is retried with backoff.",
			}),
		},
	}
	if o.Registerer != nil {
		for _, c := range []prometheus.Collector{r.metrics.stale, r.metrics.writes, r.metrics.errors} {
			if err := o.Registerer.Register(c); err != nil {
				return nil, fmt.Errorf("nodepatch: %w", err)
			}
		}
	}
	r.recorder = o.Recorder
	if r.recorder == nil {
		r.events = record.NewBroadcaster()
		r.recorder = r.events.NewRecorder(scheme.Scheme, v1.EventSource{Component: "hotplugd", Host: o.NodeName})
	}
	lw := cache.NewListWatchFromClient(o.Client.CoreV1().RESTClient(), "nodes", metav1.NamespaceAll,
		fields.OneTermEqualSelector("metadata.name", o.NodeName))
	r.informer = cache.NewSharedIndexInformer(lw, &v1.Node{}, 0, cache.Indexers{})
	if o.Journal != nil {
		// Entries made before this start were sent by an earlier hotplugd.
		r.journaled = o.Journal.Seq()
	}
	return r, nil
}

// SetPrediction gives the reporter what a restarted kubelet would report;
// the daemon calls it after every reconcile.
func (r *Reporter) SetPrediction(p Prediction) {
	r.mu.Lock()
	r.prediction = &p
	r.mu.Unlock()
	r.poke()
}

// fromJournal reads the remedy's journal: the note for the condition (the
// last attempt for this prediction, unless it worked), whether a restart is
// under way (hold the writes), and it sends the Events of new entries.
func (r *Reporter) fromJournal(pred *Prediction) (note Note, held bool) {
	j := r.o.Journal
	if j == nil {
		return Note{}, false
	}
	for _, e := range j.Since(r.journaled) {
		r.journaled = e.Seq
		if e.Reason == "" {
			continue
		}
		t := v1.EventTypeNormal
		if e.Warning {
			t = v1.EventTypeWarning
		}
		r.Event(t, e.Reason, e.Message)
	}
	if pred != nil && pred.Key != "" {
		if e, ok := j.Last(pred.Key); ok && e.Outcome != journal.OutcomeRemediated && e.Reason != "" {
			note = Note{Reason: e.Reason, Message: e.Message}
		}
	}
	return note, j.Underway() != nil
}

// HoldUntil gives a kubelet that has just started until t to report its
// Node: before t a drift is published (State) but not written, no
// condition and no Event; a Node that matches is written at once. A kubelet
// restarted by someone else reports the new machine or configuration a
// moment after hotplugd has seen the new process; that moment is not a
// drift.
func (r *Reporter) HoldUntil(t time.Time) {
	r.mu.Lock()
	r.holdUntil = t
	r.mu.Unlock()
	if d := t.Sub(r.clock.Now()); d > 0 {
		timer := r.clock.NewTimer(d)
		go func() {
			<-timer.C()
			r.poke()
		}()
	}
	r.poke()
}

// State returns what the reporter knows now.
func (r *Reporter) State() State {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.state
}

// Changed returns a channel closed at the next change of State.
func (r *Reporter) Changed() <-chan struct{} {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.changed
}

// Event sends an Event on the Node (not in dry-run mode).
func (r *Reporter) Event(eventType, reason, message string) {
	if r.o.DryRun {
		r.log.Info("dry run: would send event", zap.String("type", eventType), zap.String("reason", reason), zap.String("message", message))
		return
	}
	r.recorder.Event(r.ref, eventType, reason, message)
	r.metrics.writes.WithLabelValues("event").Inc()
}

func (r *Reporter) poke() {
	select {
	case r.wake <- struct{}{}:
	default:
	}
}

// Run watches the Node and writes until ctx is done.
func (r *Reporter) Run(ctx context.Context) error {
	if r.events != nil {
		r.events.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: r.o.Client.CoreV1().Events("")})
		defer r.events.Shutdown()
	}
	handler := cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { r.poke() },
		UpdateFunc: func(any, any) { r.poke() },
		DeleteFunc: func(any) { r.poke() },
	}
	if _, err := r.informer.AddEventHandler(handler); err != nil {
		return fmt.Errorf("nodepatch: %w", err)
	}
	go r.informer.RunWithContext(ctx)
	// The add handler's poke can come before HasSynced turns true (the
	// informer marks itself synced after handling its first list), and is
	// then skipped below: wake the loop once the cache has synced.
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), r.informer.HasSynced) {
			r.poke()
		}
	}()
	r.log.Info("watching the node", zap.String("node", r.o.NodeName), zap.Bool("dry_run", r.o.DryRun))

	var retry clock.Timer
	var retryC <-chan time.Time
	failures := 0
	for {
		var journalC <-chan struct{}
		if r.o.Journal != nil {
			journalC = r.o.Journal.Changed()
		}
		select {
		case <-ctx.Done():
			if retry != nil {
				retry.Stop()
			}
			return nil
		case <-r.wake:
		case <-journalC:
		case <-retryC:
			retryC = nil
		}
		if !r.informer.HasSynced() {
			continue // the add handler pokes once the list arrived
		}
		err := r.sync(ctx)
		if err == nil {
			failures = 0
			r.retry.Forget("node")
			r.refused.Forget("node")
			if retry != nil {
				retry.Stop()
				retryC = nil
			}
			continue
		}
		if ctx.Err() != nil {
			return nil
		}
		failures++
		r.metrics.errors.Inc()
		wait := r.backoff(err)
		fields := []zap.Field{zap.Error(err), zap.Int("attempt", failures), zap.Duration("retry_in", wait)}
		switch {
		case refusedForGood(err) && (failures == 1 || wait >= time.Minute):
			r.log.Warn("the API server refuses to write the node: check hotplugd's RBAC, its Node and admission policies; retrying less and less often", fields...)
		case failures == 1 || failures%10 == 0:
			r.log.Warn("writing the node failed; retrying", fields...)
		default:
			r.log.Debug("writing the node failed; retrying", fields...)
		}
		if retry == nil {
			retry = r.clock.NewTimer(wait)
		} else {
			retry.Reset(wait)
		}
		retryC = retry.C()
	}
}

// backoff is the wait before the next retry of a write that failed with
// err: RetryMin doubled per failure in a row, capped at RetryMax (client-go
// workqueue's exponential per-item rate limiter, forgotten on success); for
// a write refused for good, RetryMax doubled per such failure up to
// RefusedRetryMax. Minus up to 20% jitter, so that many nodes coming back
// together do not write in step.
func (r *Reporter) backoff(err error) time.Duration {
	d := r.retry.When("node")
	if refusedForGood(err) {
		d = r.refused.When("node")
	}
	return d - time.Duration(rand.Int64N(int64(d)/5+1))
}

// refusedForGood says whether the API server refused a write in a way a
// retry in seconds does not change: forbidden, unauthorized, not found,
// bad or invalid. Conflicts, throttling, timeouts and server errors are
// not: they pass.
func refusedForGood(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) || apierrors.IsNotFound(err) ||
		apierrors.IsBadRequest(err) || apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err)
}

// observed is the newest Node known: the watch's, or our last patch's
// answer when the watch has not caught up (after an API server outage the
// watch may take a while to come back, the patch answer does not).
func (r *Reporter) observed() *v1.Node {
	var node *v1.Node
	if obj, ok, _ := r.informer.GetStore().GetByKey(r.o.NodeName); ok {
		node = obj.(*v1.Node)
	}
	r.mu.Lock()
	patched := r.patched
	r.mu.Unlock()
	if node == nil || (patched != nil && newer(patched, node)) {
		if patched != nil && node == nil && r.informer.HasSynced() {
			return nil // deleted since
		}
		return patched
	}
	return node
}

func newer(a, b *v1.Node) bool {
	ra, errA := strconv.ParseUint(a.ResourceVersion, 10, 64)
	rb, errB := strconv.ParseUint(b.ResourceVersion, 10, 64)
	return errA == nil && errB == nil && ra > rb
}

// sync compares the Node with the prediction and writes what differs.
func (r *Reporter) sync(ctx context.Context) error {
	node := r.observed()
	r.mu.Lock()
	pred, holdUntil := r.prediction, r.holdUntil
	r.mu.Unlock()
	note, held := r.fromJournal(pred)
	if node == nil || pred == nil {
		r.publish(State{Node: node, Prediction: pred})
		if node == nil {
			r.log.Debug("node not registered yet; waiting for the kubelet", zap.String("node", r.o.NodeName))
		}
		return nil
	}
	drift := Compare(*pred, node.Status, r.o.MinMemoryDelta)
	r.logNoise(drift)
	now := r.clock.Now()
	want := desiredFor(node, *pred, drift, note, now)
	data := patch(node, want)
	r.publish(State{Node: node, Prediction: pred, Drift: drift})
	if held || (drift.Stale() && now.Before(holdUntil)) {
		return nil
	}
	r.maybeEvent(node, drift)
	if drift.Stale() {
		r.metrics.stale.Set(1)
	} else {
		r.metrics.stale.Set(0)
	}
	if data == nil {
		return nil
	}
	if r.o.DryRun {
		if line := string(data); line != r.dryRunLast {
			r.dryRunLast = line
			r.log.Info("dry run: would patch the node", zap.ByteString("patch", data))
		}
		return nil
	}
	n, err := r.patch(ctx, data)
	if err != nil {
		return fmt.Errorf("nodepatch: patch node %s status: %w", r.o.NodeName, err)
	}
	r.setPatched(n)
	r.metrics.writes.WithLabelValues("status").Inc()
	c := want.condition
	r.log.Info("node written", zap.String("condition", string(c.Type)), zap.String("status", string(c.Status)),
		zap.String("reason", c.Reason), zap.String("message", c.Message), zap.ByteString("patch", data))
	// Publish that the Node now carries what we want.
	r.poke()
	return nil
}

func (r *Reporter) patch(ctx context.Context, data []byte) (*v1.Node, error) {
	ctx, cancel := context.WithTimeout(ctx, r.o.RequestTimeout)
	defer cancel()
	return r.o.Client.CoreV1().Nodes().Patch(ctx, r.o.NodeName, types.StrategicMergePatchType, data, metav1.PatchOptions{FieldManager: "hotplugd"}, "status")
}

func (r *Reporter) setPatched(n *v1.Node) {
	r.mu.Lock()
	r.patched = n
	r.mu.Unlock()
}

func (r *Reporter) publish(s State) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.state = s
	close(r.changed)
	r.changed = make(chan struct{})
}

// maybeEvent sends one CapacityDrift Event per drift: when the drift
// appears or changes. At start the condition already on the Node tells
// whether this drift was reported before the daemon restarted.
func (r *Reporter) maybeEvent(node *v1.Node, drift Drift) {
	msg := ""
	if sig := drift.Significant(); len(sig) > 0 {
		msg = staleMessage(sig)
	}
	r.mu.Lock()
	if !r.started {
		r.started = true
		if c := findCondition(node); c != nil && c.Status == v1.ConditionTrue && msg != "" && strings.HasPrefix(c.Message, msg) {
			r.evented = msg
		}
	}
	send := msg != "" && msg != r.evented
	r.evented = msg
	r.mu.Unlock()
	if send {
		r.log.Warn("the kubelet reports stale capacity", zap.String("node", r.o.NodeName), zap.Stringer("drift", drift.Significant()))
		r.Event(v1.EventTypeWarning, ReasonCapacityDrift, msg)
	}
}

// logNoise logs memory differences below the minimum delta once each.
func (r *Reporter) logNoise(drift Drift) {
	noise := drift.Noise().String()
	r.mu.Lock()
	changed := noise != r.noise
	r.noise = noise
	r.mu.Unlock()
	if changed && noise != "" {
		r.log.Info("memory differs by less than --min-memory-delta; not drift", zap.String("difference", noise),
			zap.String("min_memory_delta", r.o.MinMemoryDelta.String()))
	}
}
