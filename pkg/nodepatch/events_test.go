package nodepatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/clock"
)

// sinkCall is one write of an Event, with what varies from run to run
// (names, timestamps) replaced: names by their order of appearance.
type sinkCall struct {
	Verb, Name, Type, Reason, Message string
	Count                             int32
	Patch                             string
}

// eventSink records the writes of Events and answers them as an API
// server would (the Event as written, with a resourceVersion); fail, when
// set, answers a write instead.
type eventSink struct {
	mu    sync.Mutex
	calls []sinkCall
	names map[string]string
	fail  func(verb string) error
	hang  bool // creates never answered
}

func (s *eventSink) record(verb string, e *v1.Event, patch []byte) (*v1.Event, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.names == nil {
		s.names = map[string]string{}
	}
	name, ok := s.names[e.Name]
	if !ok {
		name = fmt.Sprintf("event-%d", len(s.names)+1)
		s.names[e.Name] = name
	}
	c := sinkCall{Verb: verb, Name: name, Type: e.Type, Reason: e.Reason, Message: e.Message, Count: e.Count}
	if patch != nil {
		var p map[string]any
		if err := json.Unmarshal(patch, &p); err != nil {
			return nil, err
		}
		b, _ := json.Marshal(p) // its keys sorted
		c.Patch = string(b)
	}
	s.calls = append(s.calls, c)
	if s.fail != nil {
		if err := s.fail(verb); err != nil {
			return nil, err
		}
	}
	out := e.DeepCopy()
	out.ResourceVersion = fmt.Sprint(len(s.calls))
	return out, nil
}

func (s *eventSink) CreateWithEventNamespaceWithContext(ctx context.Context, e *v1.Event) (*v1.Event, error) {
	if s.hang {
		<-ctx.Done() // an API server that never answers
		return nil, ctx.Err()
	}
	return s.record("create", e, nil)
}

func (s *eventSink) PatchWithEventNamespaceWithContext(_ context.Context, e *v1.Event, data []byte) (*v1.Event, error) {
	return s.record("patch", e, data)
}

// Create, Update and Patch are client-go's record.EventSink.
func (s *eventSink) Create(e *v1.Event) (*v1.Event, error) { return s.record("create", e, nil) }
func (s *eventSink) Update(e *v1.Event) (*v1.Event, error) { return s.record("update", e, nil) }
func (s *eventSink) Patch(e *v1.Event, data []byte) (*v1.Event, error) {
	return s.record("patch", e, data)
}

func (s *eventSink) Calls() []sinkCall {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]sinkCall(nil), s.calls...)
}

// nodeEvents are the Events of TestEventSenderLikeClientGo: repeats (a
// count), Events of other reasons in between, more than ten messages of one
// reason (combined), and more than 25 Events of one type (the spam
// filter).
func nodeEvents() [][3]string {
	ev := [][3]string{
		{v1.EventTypeWarning, ReasonCapacityDrift, "cpu: kubelet 2, machine 1"},
		{v1.EventTypeWarning, ReasonCapacityDrift, "cpu: kubelet 2, machine 1"},
		{v1.EventTypeNormal, "Remediated", "the kubelet restarted"},
		{v1.EventTypeWarning, ReasonCapacityDrift, "cpu: kubelet 2, machine 1"},
		{"Unknown", "Odd", "an unsupported type: dropped"},
	}
	for i := range 14 {
		ev = append(ev, [3]string{v1.EventTypeWarning, "RestartWithheld", fmt.Sprintf("withheld %d", i)})
	}
	for range 30 {
		ev = append(ev, [3]string{v1.EventTypeNormal, "Remediated", "the kubelet restarted"})
	}
	return ev
}

// TestEventSenderLikeClientGo: the writer's Events reach the API server as
// client-go's event recorder sends them, write by write (creates, count
// patches with their time stamps, combined Events, the spam filter), for
// the same Events. Each side runs in a synctest bubble: both start at the
// same fake time, so names and time stamps compare exactly, and
// synctest.Wait says when a side has written all it will.
func TestEventSenderLikeClientGo(t *testing.T) {
	ref := &v1.ObjectReference{Kind: "Node", Name: "n1", UID: types.UID("n1")}
	source := v1.EventSource{Component: "hotplugd", Host: "n1"}

	oracle, got := &eventSink{}, &eventSink{}
	synctest.Test(t, func(t *testing.T) {
		// client-go's recorder, the oracle.
		b := record.NewBroadcaster()
		b.StartRecordingToSink(oracle)
		scheme := runtime.NewScheme()
		if err := v1.AddToScheme(scheme); err != nil {
			t.Fatal(err)
		}
		rec := b.NewRecorder(scheme, source)
		for _, e := range nodeEvents() {
			rec.Event(ref, e[0], e[1], e[2])
			time.Sleep(time.Millisecond) // its broadcaster orders by arrival
		}
		synctest.Wait()
		b.Shutdown()
	})
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		s := newEventSender(got, source, zap.NewNop(), clock.RealClock{})
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		for _, e := range nodeEvents() {
			s.Event(ref, e[0], e[1], e[2])
			time.Sleep(time.Millisecond)
		}
		synctest.Wait()
		cancel()
		<-done
	})
	want := oracle.Calls()
	if diff := cmp.Diff(want, got.Calls()); diff != "" {
		t.Errorf("writes unlike client-go's recorder's (-client-go +nodepatch):\n%s", diff)
	}
	if n := len(nodeEvents()) - 1; len(want) < 20 || len(want) >= n {
		t.Errorf("client-go's recorder wrote %d times for %d Events: the test is not what it says (combined Events, the spam filter)", len(want), n)
	}
}

// TestEventSenderRetries: an Event is sent again while the API server
// cannot be reached, dropped when it refuses it, and created anew when the
// Event whose count it patches is gone.
func TestEventSenderRetries(t *testing.T) {
	ref := &v1.ObjectReference{Kind: "Node", Name: "n1", UID: types.UID("n1")}
	unreachable := errors.New("dial tcp: connection refused")
	forbidden := apierrors.NewForbidden(schema.GroupResource{Resource: "events"}, "", errors.New("no"))
	gone := apierrors.NewNotFound(schema.GroupResource{Resource: "events"}, "n1.1")
	for _, tc := range []struct {
		name   string
		events int // the same Event, sent this many times
		fail   func(verb string, n int) error
		want   []string
		waits  int
	}{
		{"sent", 1, func(string, int) error { return nil }, []string{"create"}, 0},
		{"unreachable, then sent", 1, func(_ string, n int) error {
			if n < 3 {
				return unreachable
			}
			return nil
		}, []string{"create", "create", "create"}, 2},
		{"unreachable for good", 1, func(string, int) error { return unreachable }, repeat("create", eventTries), eventTries - 1},
		{"refused", 1, func(string, int) error { return forbidden }, []string{"create"}, 0},
		{"counted", 2, func(string, int) error { return nil }, []string{"create", "patch"}, 0},
		{"counted, but gone", 2, func(verb string, _ int) error {
			if verb == "patch" {
				return gone
			}
			return nil
		}, []string{"create", "patch", "create"}, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			n := 0
			sink := &eventSink{fail: func(verb string) error { n++; return tc.fail(verb, n) }}
			s := newEventSender(sink, v1.EventSource{Component: "hotplugd", Host: "n1"}, zap.NewNop(), clock.RealClock{})
			waits := 0
			s.sleep = func(context.Context, time.Duration) bool { waits++; return true }
			for range tc.events {
				s.Event(ref, v1.EventTypeWarning, ReasonCapacityDrift, "cpu")
				s.send(context.Background(), <-s.queue)
			}
			var verbs []string
			for _, c := range sink.Calls() {
				verbs = append(verbs, c.Verb)
			}
			if diff := cmp.Diff(tc.want, verbs); diff != "" {
				t.Errorf("writes (-want +got):\n%s", diff)
			}
			if waits != tc.waits {
				t.Errorf("waited %d times, want %d", waits, tc.waits)
			}
		})
	}
}

// TestEventSenderQueue: Event never blocks; beyond eventQueue waiting
// Events, more are dropped; Run sends the queue until it is stopped.
func TestEventSenderQueue(t *testing.T) {
	ref := &v1.ObjectReference{Kind: "Node", Name: "n1"}
	sink := &eventSink{}
	// The sender's channels belong to the bubble, for synctest.Wait.
	synctest.Test(t, func(t *testing.T) {
		s := newEventSender(sink, v1.EventSource{Component: "hotplugd", Host: "n1"}, zap.NewNop(), clock.RealClock{})
		for i := range eventQueue + 5 {
			s.Event(ref, v1.EventTypeNormal, "R", fmt.Sprint(i))
		}
		if len(s.queue) != eventQueue {
			t.Fatalf("%d Events queued, want %d", len(s.queue), eventQueue)
		}
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { s.Run(ctx); close(done) }()
		synctest.Wait() // Run has sent all it will and waits
		cancel()
		<-done
		if len(s.queue) != 0 || len(sink.Calls()) == 0 {
			t.Errorf("%d Events still queued, %d written: Run did not send them", len(s.queue), len(sink.Calls()))
		}
	})
}

func repeat(s string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = s
	}
	return out
}

// TestEventName: an Event's name is its object's and the time, as
// client-go's recorder names it, or a UUID when that would be no valid
// name (the API server refuses it, and every Event of the object would be
// lost).
func TestEventName(t *testing.T) {
	at := metav1.NewTime(time.Unix(1, 2))
	if got, want := eventName("n1", at), "n1.3b9aca02"; got != want {
		t.Errorf("eventName(n1) = %q, want %q", got, want)
	}
	long := strings.Repeat("a", 250)
	got := eventName(long, at)
	if errs := validation.IsDNS1123Subdomain(got); len(errs) > 0 || strings.HasPrefix(got, long) {
		t.Errorf("eventName(250 characters) = %q: %v", got, errs)
	}
}

// TestEventWriteTimeout: a write the API server never answers ends after
// the writer's request timeout, as a failure to retry, so that it does not
// hold every later Event back.
func TestEventWriteTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newEventSender(&eventSink{hang: true}, v1.EventSource{Component: "hotplugd", Host: "n1"}, zap.NewNop(), clock.RealClock{})
		s.timeout = 10 * time.Second
		e := &v1.Event{ObjectMeta: metav1.ObjectMeta{Name: "n1.1", Namespace: "default"}, Reason: "R", Type: v1.EventTypeNormal}
		start := time.Now()
		if s.write(context.Background(), e, nil) {
			t.Error("a write never answered is done, want a retry")
		}
		if took := time.Since(start); took != s.timeout {
			t.Errorf("the write took %v, want the timeout %v", took, s.timeout)
		}
	})
}
