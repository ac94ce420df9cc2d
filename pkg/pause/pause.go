package pause

import (
	"context"
	"fmt"

	"go.uber.org/zap"
	appsv1 "k8s.io/api/apps/v1"

	"github.com/hotplugd/hotplugd/pkg/kubeclient"
	"github.com/hotplugd/hotplugd/pkg/watchone"
)

// Annotation is the DaemonSet annotation that pauses every hotplugd's
// remedy; its value is the reason, for people.
const Annotation = "hotplugd.io/pause"

// Watch follows one DaemonSet's Annotation.
type Watch struct {
	namespace, name string
	log             *zap.Logger
	w               *watchone.Watch[*appsv1.DaemonSet]
}

// NewWatch returns a Watch of the DaemonSet namespace/name; nothing is
// requested before Run.
func NewWatch(client kubeclient.Interface, namespace, name string, log *zap.Logger) *Watch {
	if log == nil {
		log = zap.NewNop()
	}
	return &Watch{namespace: namespace, name: name, log: log.Named("pause"),
		w: watchone.New(client.AppsV1().DaemonSets(namespace), namespace+"/"+name, name, &appsv1.DaemonSet{})}
}

// Run watches until ctx is done.
func (w *Watch) Run(ctx context.Context) error {
	w.log.Info("following the cluster-wide pause", zap.String("daemonset", w.namespace+"/"+w.name), zap.String("annotation", Annotation))
	return w.w.Run(ctx)
}

// Paused says why every remedy is paused ("": it is not, or the DaemonSet
// is not seen yet).
func (w *Watch) Paused() string {
	ds, ok, _ := w.w.Get()
	if !ok {
		return ""
	}
	reason, ok := ds.Annotations[Annotation]
	if !ok {
		return ""
	}
	return Why(w.namespace+"/"+w.name, reason)
}

// Changed returns a channel closed at the next change of the DaemonSet.
func (w *Watch) Changed() <-chan struct{} { return w.w.Changed() }

// Why is the remedy's reason while paused.
func Why(daemonSet, reason string) string {
	if reason == "" {
		reason = "no reason given"
	}
	return fmt.Sprintf("remedies are paused cluster-wide (annotation %s on DaemonSet %s: %q): reporting only", Annotation, daemonSet, reason)
}
