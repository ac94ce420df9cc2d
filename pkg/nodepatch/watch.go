package nodepatch

import (
	"context"
	"fmt"
	"sync"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Watch follows hotplugd's own Node: one watch, field-selected by name. It
// is a source of the control loop: it decides and writes nothing.
type Watch struct {
	name     string
	log      *zap.Logger
	informer cache.SharedIndexInformer

	mu      sync.Mutex
	changed chan struct{}
}

// NewWatch returns a Watch of the Node name; nothing is requested before
// Run.
func NewWatch(client kubernetes.Interface, name string, log *zap.Logger) *Watch {
	if log == nil {
		log = zap.NewNop()
	}
	lw := cache.NewListWatchFromClient(client.CoreV1().RESTClient(), "nodes", metav1.NamespaceAll,
		fields.OneTermEqualSelector("metadata.name", name))
	return &Watch{
		name:     name,
		log:      log.Named("nodepatch"),
		informer: cache.NewSharedIndexInformer(lw, &v1.Node{}, 0, cache.Indexers{}),
		changed:  make(chan struct{}),
	}
}

// Run watches until ctx is done.
func (w *Watch) Run(ctx context.Context) error {
	poke := func(any) { w.poke() }
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(any, any) { w.poke() }, DeleteFunc: poke,
	}); err != nil {
		return fmt.Errorf("nodepatch: %w", err)
	}
	go func() {
		// The add handler's poke can come before HasSynced turns true
		// (the informer marks itself synced after handling its first
		// list): poke once the cache has synced.
		if cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
			w.poke()
		}
	}()
	w.log.Info("watching the node", zap.String("node", w.name))
	w.informer.RunWithContext(ctx)
	return nil
}

// Node returns the Node as last seen (nil: none) and whether the first list
// has arrived (before it, nil says nothing).
func (w *Watch) Node() (*v1.Node, bool) {
	if !w.informer.HasSynced() {
		return nil, false
	}
	obj, ok, _ := w.informer.GetStore().GetByKey(w.name)
	if !ok {
		return nil, true
	}
	return obj.(*v1.Node), true
}

// Changed returns a channel closed at the next change of the Node.
func (w *Watch) Changed() <-chan struct{} {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.changed
}

func (w *Watch) poke() {
	w.mu.Lock()
	defer w.mu.Unlock()
	close(w.changed)
	w.changed = make(chan struct{})
}
