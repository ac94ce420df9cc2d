package hugepagewatch

import (
	"context"
	"errors"
	"os"
	"testing"
	"time"

	"github.com/fsnotify/fsnotify"
	"github.com/google/go-cmp/cmp"
	"go.uber.org/zap"
)

// call is one Handler call.
type call struct {
	Changed    string
	Overflow   string // the error's text
	IsOverflow bool   // errors.Is(err, fsnotify.ErrEventOverflow)
}

type callRecorder struct{ calls []call }

func (r *callRecorder) Changed(path string) { r.calls = append(r.calls, call{Changed: path}) }
func (r *callRecorder) Overflow(err error) {
	r.calls = append(r.calls, call{Overflow: err.Error(), IsOverflow: errors.Is(err, fsnotify.ErrEventOverflow)})
}

// TestLoop feeds Run's loop fsnotify events and errors and checks what the
// handler gets.
func TestLoop(t *testing.T) {
	const (
		watchedPath = "/sys/kernel/mm/hugepages/hugepages-2048kB/nr_hugepages"
		other       = "/sys/kernel/mm/hugepages/hugepages-2048kB/free_hugepages"
	)
	tests := []struct {
		name string
		in   []any // fsnotify.Event or error, in order
		want []call
	}{
		{
			name: "write",
			in:   []any{fsnotify.Event{Name: watchedPath, Op: fsnotify.Write}},
			want: []call{{Changed: watchedPath}},
		},
		{
			name: "every event of a write",
			in: []any{
				fsnotify.Event{Name: watchedPath, Op: fsnotify.Write},
				fsnotify.Event{Name: watchedPath, Op: fsnotify.Write},
			},
			want: []call{{Changed: watchedPath}, {Changed: watchedPath}},
		},
		{
			name: "chmod",
			in:   []any{fsnotify.Event{Name: watchedPath, Op: fsnotify.Chmod}},
			want: []call{{Changed: watchedPath}},
		},
		{
			name: "write and chmod in one event",
			in:   []any{fsnotify.Event{Name: watchedPath, Op: fsnotify.Write | fsnotify.Chmod}},
			want: []call{{Changed: watchedPath}},
		},
		{
			name: "path not watched",
			in: []any{
				fsnotify.Event{Name: other, Op: fsnotify.Write},
				fsnotify.Event{Name: watchedPath + "/", Op: fsnotify.Write},
			},
		},
		{
			name: "remove and rename are left to Rescan",
			in: []any{
				fsnotify.Event{Name: watchedPath, Op: fsnotify.Remove},
				fsnotify.Event{Name: watchedPath, Op: fsnotify.Rename},
				fsnotify.Event{Name: watchedPath, Op: fsnotify.Create},
			},
		},
		{
			name: "overflow",
			in:   []any{fsnotify.ErrEventOverflow},
			want: []call{{Overflow: "hugepagewatch: fsnotify: queue or buffer overflow", IsOverflow: true}},
		},
		{
			name: "other errors are overflows too, and do not stop the loop",
			in: []any{
				os.ErrInvalid,
				fsnotify.Event{Name: watchedPath, Op: fsnotify.Write},
				fsnotify.ErrEventOverflow,
				fsnotify.Event{Name: watchedPath, Op: fsnotify.Write},
			},
			want: []call{
				{Overflow: "hugepagewatch: invalid argument"},
				{Changed: watchedPath},
				{Overflow: "hugepagewatch: fsnotify: queue or buffer overflow", IsOverflow: true},
				{Changed: watchedPath},
			},
		},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			w := &Watcher{log: zap.NewNop(), files: map[string]watched{watchedPath: {}}}
			// Unbuffered: each send completes before the next, so the loop
			// sees them in order although it selects on two channels.
			events := make(chan fsnotify.Event)
			errs := make(chan error)
			rec := &callRecorder{}
			done := make(chan error, 1)
			go func() { done <- w.loop(context.Background(), rec, events, errs) }()
			for _, x := range tc.in {
				switch x := x.(type) {
				case fsnotify.Event:
					events <- x
				case error:
					errs <- x
				}
			}
			close(events) // as fsnotify's Close does
			select {
			case err := <-done:
				if err != nil {
					t.Errorf("loop = %v, want nil", err)
				}
			case <-time.After(5 * time.Second):
				t.Fatal("loop did not return when its channels closed")
			}
			if diff := cmp.Diff(tc.want, rec.calls); diff != "" {
				t.Errorf("unexpected handler calls (-want +got):\n%s", diff)
			}
		})
	}
}

// TestLoopCancel checks that the loop returns nil when its context is done,
// with nothing to read.
func TestLoopCancel(t *testing.T) {
	w := &Watcher{log: zap.NewNop()}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := w.loop(ctx, &callRecorder{}, make(chan fsnotify.Event), make(chan error)); err != nil {
		t.Errorf("loop = %v, want nil", err)
	}
}
