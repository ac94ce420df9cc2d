package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"

	"github.com/hotplugd/hotplugd/pkg/nodepatch"
	"github.com/hotplugd/hotplugd/pkg/preflight"
	"github.com/hotplugd/hotplugd/pkg/statefile"
)

// pruneOptions are the flags of `hotplugd prune`.
type pruneOptions struct {
	NodeName       string
	Kubeconfig     string
	KubeletRootDir string
	KeepBackups    int
	DryRun         bool
	Timeout        time.Duration
}

func (o *pruneOptions) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.NodeName, "node-name", "", "the Node to clean (default $NODE_NAME, else the host name in lower case, as the kubelet names it)")
	fs.StringVar(&o.Kubeconfig, "kubeconfig", "", "kubeconfig for the API server (default: the pod's service account, else $KUBECONFIG or ~/.kube/config)")
	fs.StringVar(&o.KubeletRootDir, "kubelet-root-dir", "", "also remove the backups hotplugd preflight kept of the kubelet's state files in this directory (the kubelet's --root-dir), all but the newest --keep-backups of each")
	fs.IntVar(&o.KeepBackups, "keep-backups", 0, "with --kubelet-root-dir: how many of each state file's newest backups to keep")
	fs.BoolVar(&o.DryRun, "dry-run", false, "say what would be removed; remove nothing (the Node patch is sent as a server-side dry run)")
	fs.DurationVar(&o.Timeout, "timeout", 30*time.Second, "give up on the API server after this long")
}

func (o *pruneOptions) Validate() error {
	if o.KeepBackups < 0 {
		return fmt.Errorf("--keep-backups must not be negative, not %d", o.KeepBackups)
	}
	if o.Timeout <= 0 {
		return fmt.Errorf("--timeout must be positive, not %v", o.Timeout)
	}
	return nil
}

func runPrune(args []string, stdout, stderr io.Writer) int {
	var o pruneOptions
	if code, done := parseFlags("prune", `Usage: hotplugd prune [--node-name NAME] [--kubeconfig FILE] [--kubelet-root-dir DIR [--keep-backups N]] [--dry-run]

Removes what hotplugd leaves behind, for an uninstall (stop hotplugd first: a
running one writes its condition again): the condition KubeletCapacityStale
and every annotation under hotplugd.io/ on its Node (its own token may do
exactly that), and with --kubelet-root-dir the backups hotplugd preflight kept
of the kubelet's state files. It touches nothing else: not the kubelet, not its
state files, not its drop-in. Exit status 0 when everything that was found is
removed, 1 otherwise.

Flags:
%s`, &o, args, stderr); done {
		return code
	}
	code := 0
	if err := o.pruneNode(stdout); err != nil {
		fmt.Fprintf(stderr, "hotplugd prune: %v\n", err)
		code = 1
	}
	if o.KubeletRootDir != "" {
		verb := "removed"
		if o.DryRun {
			verb = "would remove"
		}
		for _, name := range []string{preflight.CPUManagerState, preflight.MemoryManagerState} {
			path := filepath.Join(o.KubeletRootDir, name)
			var removed []string
			var err error
			if o.DryRun {
				var all []string
				all, err = statefile.Backups(path)
				if len(all) > o.KeepBackups {
					removed = all[:len(all)-o.KeepBackups]
				}
			} else {
				removed, err = statefile.PruneBackups(path, o.KeepBackups)
			}
			for _, b := range removed {
				fmt.Fprintf(stdout, "%s %s\n", verb, b)
			}
			if err != nil {
				fmt.Fprintf(stderr, "hotplugd prune: %v\n", err)
				code = 1
			}
		}
	}
	return code
}

// pruneNode removes hotplugd's condition and annotations from its Node.
func (o *pruneOptions) pruneNode(stdout io.Writer) error {
	node, err := nodeName(o.NodeName)
	if err != nil {
		return err
	}
	client, _, err := nodepatch.NewClient(nodepatch.ClientOptions{Kubeconfig: o.Kubeconfig, QPS: 5, Burst: 10, Version: version})
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), o.Timeout)
	defer cancel()
	owned, err := nodepatch.Prune(ctx, client, node, o.DryRun)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "Node %s: %s\n", node, describeOwned(owned, o.DryRun))
	return nil
}

// describeOwned says what was (or would be) removed from a Node.
func describeOwned(o nodepatch.Owned, dryRun bool) string {
	if o.Empty() {
		return "carries nothing of hotplugd's"
	}
	var parts []string
	if o.Condition != nil {
		parts = append(parts, fmt.Sprintf("condition %s (%s, %s)", nodepatch.ConditionType, o.Condition.Status, o.Condition.Reason))
	}
	if len(o.Annotations) > 0 {
		parts = append(parts, "annotations "+strings.Join(o.Annotations, ", "))
	}
	verb := "removed "
	if dryRun {
		verb = "would remove "
	}
	return verb + strings.Join(parts, "; ")
}
