package watchone

import (
	"context"
	"fmt"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"
)

// Lister is a typed client's List and Watch (e.g. client.CoreV1().Nodes()).
type Lister[L runtime.Object] interface {
	List(ctx context.Context, o metav1.ListOptions) (L, error)
	Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error)
}

// Watch follows the object key (name, or namespace/name) of type T.
type Watch[T runtime.Object] struct {
	key      string
	informer cache.SharedIndexInformer

	mu      sync.Mutex
	changed chan struct{}
}

// New returns a Watch of the object name that c lists (its namespace's,
// when c is namespaced: key is then namespace/name); example is an empty
// T (&v1.Node{}). Nothing is requested before Run.
func New[T, L runtime.Object](c Lister[L], key, name string, example T) *Watch[T] {
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return c.List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return c.Watch(ctx, o)
		},
	}
	return &Watch[T]{key: key, informer: cache.NewSharedIndexInformer(lw, example, 0, cache.Indexers{}), changed: make(chan struct{})}
}

// Run watches until ctx is done.
func (w *Watch[T]) Run(ctx context.Context) error {
	poke := func(any) { w.poke() }
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(any, any) { w.poke() }, DeleteFunc: poke,
	}); err != nil {
		return fmt.Errorf("watchone: %w", err)
	}
	go func() {
		// The add handler's poke can come before HasSynced turns true
		// (the informer marks itself synced after handling its first
		// list): poke once the cache has synced.
		if cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
			w.poke()
		}
	}()
	w.informer.RunWithContext(ctx)
	return nil
}

// Get returns the object as last seen (ok false: none) and whether the
// first list has arrived (before it, no object says nothing).
func (w *Watch[T]) Get() (obj T, ok, synced bool) {
	if !w.informer.HasSynced() {
		return obj, false, false
	}
	o, ok, _ := w.informer.GetStore().GetByKey(w.key)
	if !ok {
		return obj, false, true
	}
	return o.(T), true, true
}

// Changed returns a channel closed at the object's next change.
func (w *Watch[T]) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

func (w *Watch[T]) poke() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
}
