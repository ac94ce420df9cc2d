package pause

import (
	"context"
	"fmt"
	"sync"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// Annotation is the DaemonSet annotation that pauses every hotplugd's
// remedy; its value is the reason, for people.
const Annotation = "hotplugd.io/pause"

// Watch follows one DaemonSet's Annotation.
type Watch struct {
	namespace, name string
	log             *zap.Logger
	informer        cache.SharedIndexInformer

	mu      sync.Mutex
	changed chan struct{}
}

// NewWatch returns a Watch of the DaemonSet namespace/name; nothing is
// requested before Run.
func NewWatch(client kubernetes.Interface, namespace, name string, log *zap.Logger) *Watch {
	if log == nil {
		log = zap.NewNop()
	}
	// Field-selected by name: the Role's resourceNames allow no other
	// list or watch.
	sel := fields.OneTermEqualSelector("metadata.name", name).String()
	lw := &cache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			o.FieldSelector = sel
			return client.AppsV1().DaemonSets(namespace).List(ctx, o)
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			o.FieldSelector = sel
			return client.AppsV1().DaemonSets(namespace).Watch(ctx, o)
		},
	}
	return &Watch{
		namespace: namespace, name: name,
		log:      log.Named("pause"),
		informer: cache.NewSharedIndexInformer(lw, &appsv1.DaemonSet{}, 0, cache.Indexers{}),
		changed:  make(chan struct{}),
	}
}

// Run watches until ctx is done.
func (w *Watch) Run(ctx context.Context) error {
	poke := func(any) { w.poke() }
	if _, err := w.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: poke, UpdateFunc: func(any, any) { w.poke() }, DeleteFunc: poke,
	}); err != nil {
		return fmt.Errorf("pause: %w", err)
	}
	go func() {
		if cache.WaitForCacheSync(ctx.Done(), w.informer.HasSynced) {
			w.poke()
		}
	}()
	w.log.Info("following the cluster-wide pause", zap.String("daemonset", w.namespace+"/"+w.name), zap.String("annotation", Annotation))
	w.informer.RunWithContext(ctx)
	return nil
}

// Paused says why every remedy is paused ("": it is not, or the DaemonSet
// is not seen yet).
func (w *Watch) Paused() string {
	obj, ok, _ := w.informer.GetStore().GetByKey(w.namespace + "/" + w.name)
	if !ok {
		return ""
	}
	ds := obj.(*appsv1.DaemonSet)
	reason, ok := ds.Annotations[Annotation]
	if !ok {
		return ""
	}
	return Why(w.namespace+"/"+w.name, reason)
}

// Why is the remedy's reason while paused.
func Why(daemonSet, reason string) string {
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Sprintf("remedies are paused cluster-wide (annotation %s on DaemonSet %s: %q): reporting only", Annotation, daemonSet, reason)
}

// Changed returns a channel closed at the next change of the DaemonSet.
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
