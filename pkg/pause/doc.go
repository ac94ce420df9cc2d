// Package pause follows the cluster-wide switch that pauses every
// hotplugd's remedy at once: the annotation hotplugd.io/pause on the
// DaemonSet that runs them (kubectl -n hotplugd-system annotate daemonset
// hotplugd hotplugd.io/pause="reason"). An annotation on the DaemonSet
// object, not its pod template, rolls nothing out. While it is set, every
// pod goes on reporting and restarts no kubelet; removing it lets them
// act again.
//
// It is a package of its own because it is a second source of the control
// loop, beside the Node: one watch of one object, field-selected by name
// (the Role grants get, list and watch on that DaemonSet alone). It decides
// and writes nothing.
package pause
