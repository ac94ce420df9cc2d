package nodepatch

import (
	"context"

	"go.uber.org/zap"
	v1 "k8s.io/api/core/v1"

	"github.com/hotplugd/hotplugd/pkg/kubeclient"
	"github.com/hotplugd/hotplugd/pkg/watchone"
)

// Watch follows hotplugd's own Node: one watch, field-selected by name. It
// is a source of the control loop: it decides and writes nothing.
type Watch struct {
	name string
	log  *zap.Logger
	w    *watchone.Watch[*v1.Node]
}

// NewWatch returns a Watch of the Node name; nothing is requested before
// Run.
func NewWatch(client kubeclient.Interface, name string, log *zap.Logger) *Watch {
	if log == nil {
		log = zap.NewNop()
	}
	return &Watch{name: name, log: log.Named("nodepatch"), w: watchone.New(client.CoreV1().Nodes(), name, name, &v1.Node{})}
}

// Run watches until ctx is done.
func (w *Watch) Run(ctx context.Context) error {
	w.log.Info("watching the node", zap.String("node", w.name))
	return w.w.Run(ctx)
}

// Node returns the Node as last seen (nil: none) and whether the first list
// has arrived (before it, nil says nothing).
func (w *Watch) Node() (*v1.Node, bool) {
	n, _, synced := w.w.Get()
	return n, synced
}

// Changed returns a channel closed at the next change of the Node.
func (w *Watch) Changed() <-chan struct{} { return w.w.Changed() }
