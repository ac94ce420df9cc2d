package nodepatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"time"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/uuid"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
	"k8s.io/utils/clock"

	"github.com/hotplugd/hotplugd/pkg/kubeclient"
)

// EventRecorder records an Event about an object (client-go's
// record.EventRecorder's Event; record.NewFakeRecorder serves tests).
type EventRecorder interface {
	Event(object runtime.Object, eventtype, reason, message string)
}

// The event sender's bounds: client-go's event recorder's (tools/record).
const (
	eventQueue      = 1000             // Events waiting to be sent; more are dropped
	eventTries      = 12               // attempts per Event
	eventRetry      = 10 * time.Second // between attempts (the first one randomised)
	eventCacheSize  = 4096             // Events (and groups of similar ones) remembered
	aggregateAfter  = 10               // similar Events (one reason, other messages) before they are combined...
	aggregateWindow = 10 * time.Minute // ...within this time
	spamBurst       = 25               // Events of one type about the Node sent at once at most...
	spamRefill      = 1. / 300.        // ...then one per 5 minutes
	aggregatePrefix = "(combined from similar events): "
)

// eventSender is the writer's Events on the Node as client-go's event
// recorder sends them (record.NewBroadcaster, StartRecordingToSink): the
// Event made as its recorder makes it, queued (at most eventQueue, more are
// dropped) and sent in the background; the same Event again within the
// cache is a PATCH of its count and lastTimestamp; after aggregateAfter
// Events of one reason with other messages within aggregateWindow, they
// are combined into one "(combined from similar events)" Event; at most
// spamBurst Events of one type about the Node at once, then one per 5
// minutes; each sent up to eventTries times, eventRetry apart, while the
// API server cannot be reached (one it refuses is dropped).
//
// Not client-go's recorder: its package links client-go's strategic merge
// patching, and with it kube-openapi, the OpenAPI models and two YAML
// libraries, whose package initialisation costs the daemon about 1.2 MiB of
// its RSS at every start (issue 23; pkg/kubeclient has the rest). The one
// patch it computes here is the count's.
type eventSender struct {
	events kubeclient.EventInterface
	source v1.EventSource
	log    *zap.Logger
	clock  clock.PassiveClock
	queue  chan *v1.Event
	// sleep waits between attempts (a timer; replaced in tests).
	sleep func(context.Context, time.Duration) bool
	// timeout bounds one write (0: none), as the Node's writes are
	// bounded: one hung request would hold every later Event back.
	timeout time.Duration

	// Only the sending goroutine touches these.
	aggregates map[string]aggregate
	observed   map[string]observation
	spam       map[string]flowcontrol.PassiveRateLimiter
}

// aggregate is what the sender remembers of one group of similar Events.
type aggregate struct {
	messages map[string]bool
	last     time.Time
}

// observation is what the sender remembers of one Event it sent.
type observation struct {
	count           int32
	firstTimestamp  metav1.Time
	name            string
	resourceVersion string
}

func newEventSender(events kubeclient.EventInterface, source v1.EventSource, log *zap.Logger, clk clock.PassiveClock) *eventSender {
	return &eventSender{
		events: events, source: source, log: log, clock: clk,
		queue: make(chan *v1.Event, eventQueue),
		sleep: func(ctx context.Context, d time.Duration) bool {
			t := time.NewTimer(d)
			defer t.Stop()
			select {
			case <-ctx.Done():
				return false
			case <-t.C:
				return true
			}
		},
		aggregates: map[string]aggregate{},
		observed:   map[string]observation{},
		spam:       map[string]flowcontrol.PassiveRateLimiter{},
	}
}

// Event queues an Event about object, which must be an object reference
// (the writer's Node); it never blocks.
func (s *eventSender) Event(object runtime.Object, eventtype, reason, message string) {
	ref, ok := object.(*v1.ObjectReference)
	if !ok {
		s.log.Error("an event about an object that is not a reference: dropped", zap.String("reason", reason))
		return
	}
	if eventtype != v1.EventTypeNormal && eventtype != v1.EventTypeWarning {
		s.log.Error("unsupported event type: dropped", zap.String("type", eventtype), zap.String("reason", reason))
		return
	}
	now := metav1.NewTime(s.clock.Now())
	namespace := ref.Namespace
	if namespace == "" {
		namespace = metav1.NamespaceDefault
	}
	e := &v1.Event{
		ObjectMeta:          metav1.ObjectMeta{Name: eventName(ref.Name, now), Namespace: namespace},
		InvolvedObject:      *ref,
		Reason:              reason,
		Message:             message,
		FirstTimestamp:      now,
		LastTimestamp:       now,
		Count:               1,
		Type:                eventtype,
		Source:              s.source,
		ReportingController: s.source.Component,
		ReportingInstance:   s.source.Host,
	}
	select {
	case s.queue <- e:
	default:
		s.log.Error("too many events waiting to be sent: dropped", zap.String("reason", reason), zap.String("message", message))
	}
}

// Run sends the queued Events until ctx is done; those still queued then
// are dropped.
func (s *eventSender) Run(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case e := <-s.queue:
			s.send(ctx, e)
		}
	}
}

// send correlates e with the Events sent before and sends the result.
func (s *eventSender) send(ctx context.Context, e *v1.Event) {
	e, patch := s.correlate(e)
	if e == nil {
		return
	}
	for try := 1; ; try++ {
		if s.write(ctx, e, patch) {
			return
		}
		if try >= eventTries {
			s.log.Error("cannot send an event: retry limit exceeded", zap.String("reason", e.Reason), zap.String("message", e.Message))
			return
		}
		// The first wait is random: nodes that lost the API server
		// together do not come back in step.
		d := eventRetry
		if try == 1 {
			d = time.Duration(float64(d) * rand.Float64())
		}
		if !s.sleep(ctx, d) {
			return
		}
	}
}

// write sends e once (a patch of its count when one is given, a create
// otherwise or when the Event patched is gone) and says whether it is done
// with it: sent, or refused by the API server, which a retry will not
// change.
func (s *eventSender) write(ctx context.Context, e *v1.Event, patch []byte) bool {
	if s.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, s.timeout)
		defer cancel()
	}
	var sent *v1.Event
	var err error
	if patch != nil {
		sent, err = s.events.PatchWithEventNamespaceWithContext(ctx, e, patch)
	}
	if patch == nil || apierrors.IsNotFound(err) {
		e.ResourceVersion = ""
		sent, err = s.events.CreateWithEventNamespaceWithContext(ctx, e)
	}
	if err == nil {
		s.remember(eventKey(sent), sent)
		return true
	}
	var construction *rest.RequestConstructionError
	var status *apierrors.StatusError
	switch {
	case errors.As(err, &construction):
		s.log.Error("cannot make the event's request: dropped", zap.String("reason", e.Reason), zap.Error(err))
		return true
	case errors.As(err, &status):
		if apierrors.IsAlreadyExists(err) || apierrors.HasStatusCause(err, v1.NamespaceTerminatingCause) {
			s.log.Debug("the API server refused the event: dropped", zap.String("reason", e.Reason), zap.Error(err))
		} else {
			s.log.Error("the API server refused the event: dropped", zap.String("reason", e.Reason), zap.Error(err))
		}
		return true
	}
	s.log.Error("cannot send an event (retrying)", zap.String("reason", e.Reason), zap.Error(err))
	return false
}

// correlate is client-go's EventCorrelate: the Event to send (nil: none,
// the spam filter holds it back) and, for one sent before, the patch of its
// count.
func (s *eventSender) correlate(e *v1.Event) (*v1.Event, []byte) {
	now := s.clock.Now()
	// Similar Events: one reason, other messages.
	groupKey := strings.Join([]string{e.Source.Component, e.Source.Host, e.InvolvedObject.Kind, e.InvolvedObject.Namespace,
		e.InvolvedObject.Name, string(e.InvolvedObject.UID), e.InvolvedObject.APIVersion, e.Type, e.Reason,
		e.ReportingController, e.ReportingInstance}, "")
	g := s.aggregates[groupKey]
	if now.Sub(g.last) > aggregateWindow {
		g = aggregate{messages: map[string]bool{}}
	}
	g.messages[e.Message] = true
	g.last = now
	key := eventKey(e)
	if len(g.messages) >= aggregateAfter {
		for m := range g.messages { // one out, as client-go pops one
			delete(g.messages, m)
			break
		}
		t := metav1.NewTime(now)
		e = &v1.Event{
			ObjectMeta:     metav1.ObjectMeta{Name: eventName(e.InvolvedObject.Name, t), Namespace: e.Namespace},
			Count:          1,
			FirstTimestamp: t,
			InvolvedObject: e.InvolvedObject,
			LastTimestamp:  t,
			Message:        aggregatePrefix + e.Message,
			Type:           e.Type,
			Reason:         e.Reason,
			Source:         e.Source,
		}
		key = groupKey
	}
	bounded(s.aggregates)[groupKey] = g

	// The same Event again: its count goes up.
	var patch []byte
	if last, ok := s.observed[key]; ok && last.count > 0 {
		e.Name, e.ResourceVersion, e.FirstTimestamp = last.name, last.resourceVersion, last.firstTimestamp
		e.Count = last.count + 1
		// client-go's two-way merge patch from the Event without count,
		// lastTimestamp and message to the Event.
		p := map[string]any{"count": e.Count, "lastTimestamp": e.LastTimestamp}
		if e.Message != "" {
			p["message"] = e.Message
		}
		patch, _ = json.Marshal(p)
	}
	s.remember(key, e)

	// At most spamBurst Events about the object, then one per 5 minutes.
	spamKey := strings.Join([]string{e.Source.Component, e.Source.Host, e.InvolvedObject.Kind, e.InvolvedObject.Namespace,
		e.InvolvedObject.Name, string(e.InvolvedObject.UID), e.InvolvedObject.APIVersion, e.Type}, "")
	limiter, ok := s.spam[spamKey]
	if !ok {
		limiter = flowcontrol.NewTokenBucketPassiveRateLimiterWithClock(spamRefill, spamBurst, s.clock)
		bounded(s.spam)[spamKey] = limiter
	}
	if !limiter.TryAccept() {
		return nil, nil
	}
	return e, patch
}

// remember notes e (as sent, or about to be) under key.
func (s *eventSender) remember(key string, e *v1.Event) {
	bounded(s.observed)[key] = observation{count: e.Count, firstTimestamp: e.FirstTimestamp, name: e.Name, resourceVersion: e.ResourceVersion}
}

// eventKey identifies an Event up to its count and times (client-go's
// getEventKey).
func eventKey(e *v1.Event) string {
	return strings.Join([]string{e.Source.Component, e.Source.Host, e.InvolvedObject.Kind, e.InvolvedObject.Namespace,
		e.InvolvedObject.Name, e.InvolvedObject.FieldPath, string(e.InvolvedObject.UID), e.InvolvedObject.APIVersion,
		e.Type, e.Reason, e.Message}, "")
}

// bounded empties m when it holds eventCacheSize entries (client-go keeps
// the most recent ones; the writer's Events are about one Node, so the cap
// is reached, if ever, by Events long past).
func bounded[V any](m map[string]V) map[string]V {
	if len(m) >= eventCacheSize {
		clear(m)
	}
	return m
}

// eventName names a new Event of the object named object, as client-go's
// recorder does (record/util.GenerateEventName, not linked for its
// dependencies): <object>.<time in hex>, or a UUID when that is no valid
// name (an object name near the 253-character limit).
func eventName(object string, t metav1.Time) string {
	name := fmt.Sprintf("%v.%x", object, t.UnixNano())
	if len(validation.IsDNS1123Subdomain(name)) > 0 {
		return string(uuid.NewUUID())
	}
	return name
}
