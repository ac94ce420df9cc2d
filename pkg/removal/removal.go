package removal

import (
	"context"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/hotplugd/hotplugd/pkg/kubeclient"
)

// Detector says whether hotplugd is being removed, and why it thinks so.
type Detector interface {
	Removing(ctx context.Context) (bool, string, error)
	String() string
}

// Parse reads --prune-on-removal: "daemonset/NAMESPACE/NAME" or
// "systemd/UNIT" ("" is none: nil, nil). Kinds are the installer's; client
// is used by a DaemonSet's, fileState by a unit's.
func Parse(spec string, client kubeclient.Interface, fileState func(ctx context.Context, unit string) (string, error)) (Detector, error) {
	if spec == "" {
		return nil, nil
	}
	kind, rest, _ := strings.Cut(spec, "/")
	switch kind {
	case "daemonset":
		ns, name, ok := strings.Cut(rest, "/")
		if !ok || ns == "" || name == "" || strings.Contains(name, "/") {
			return nil, fmt.Errorf("--prune-on-removal %q: want daemonset/NAMESPACE/NAME", spec)
		}
		return DaemonSet{Client: client, Namespace: ns, Name: name}, nil
	case "systemd":
		if rest == "" || strings.Contains(rest, "/") {
			return nil, fmt.Errorf("--prune-on-removal %q: want systemd/UNIT", spec)
		}
		return Unit{Name: rest, FileState: fileState}, nil
	}
	return nil, fmt.Errorf("--prune-on-removal %q: want daemonset/NAMESPACE/NAME or systemd/UNIT", spec)
}

// DaemonSet is hotplugd run by a DaemonSet: it is being removed when its
// DaemonSet is gone (deleted with the default background propagation: the
// garbage collector then deletes the pods) or being deleted (foreground
// propagation keeps it, with a deletion timestamp, until its pods are
// gone). An update, a drain or an eviction leaves the DaemonSet as it is.
type DaemonSet struct {
	Client          kubeclient.Interface
	Namespace, Name string
}

func (d DaemonSet) String() string { return "DaemonSet " + d.Namespace + "/" + d.Name }

func (d DaemonSet) Removing(ctx context.Context) (bool, string, error) {
	ds, err := d.Client.AppsV1().DaemonSets(d.Namespace).Get(ctx, d.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, d.String() + " is gone", nil
	case err != nil:
		return false, "", fmt.Errorf("reading %s: %w", d, err)
	case ds.DeletionTimestamp != nil:
		return true, d.String() + " is being deleted", nil
	}
	return false, d.String() + " remains (an update, a drain or an eviction)", nil
}

// Unit is hotplugd run by a systemd unit: it is being removed when the
// unit is disabled or masked as it stops (`systemctl disable --now`
// disables first). A plain stop, a restart or a reboot leaves it enabled.
// FileState is systemd's UnitFileState of a unit.
type Unit struct {
	Name      string
	FileState func(ctx context.Context, unit string) (string, error)
}

func (u Unit) String() string { return "systemd unit " + u.Name }

func (u Unit) Removing(ctx context.Context) (bool, string, error) {
	if u.FileState == nil {
		return false, "", fmt.Errorf("%s: no connection to systemd", u)
	}
	state, err := u.FileState(ctx, u.Name)
	if err != nil {
		return false, "", fmt.Errorf("reading the UnitFileState of %s: %w", u, err)
	}
	switch state {
	case "disabled", "masked", "masked-runtime":
		return true, fmt.Sprintf("%s is %s", u, state), nil
	}
	return false, fmt.Sprintf("%s is %s (a stop or a restart)", u, state), nil
}
