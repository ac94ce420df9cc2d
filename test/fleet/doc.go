// Package fleet measures what hotplugd costs the Kubernetes API server, and
// checks the cluster-wide restart budget, with many nodes: one real
// kube-apiserver and etcd (internal/kubeapitest) and N simulated nodes, each
// a real `hotplugd run` process with a fixture machine of its own
// (internal/fixturegen, through --sysfs-root and --procfs-root), its own
// Node, remedy journal and lock (--state-dir), and a kubelet that is only a
// restart command: the test binary, re-executed as a helper, asks the test
// to do what a restarted kubelet does (report the machine on its Node).
//
// TestFleet starts the fleet in waves, lets it idle, changes every node's
// hugepages at once, and lets the remedy restart every "kubelet" under the
// restart budget while it SIGKILLs budget holders and nodes in the middle
// of a restart and starts them again, as a DaemonSet controller would. Two
// kubelets restart slowly, in twice the budget's Lease duration, so that
// their holds live only by renewals; the first kill hits one of them during
// its restart, where the next hotplugd must keep the hold until the restart
// is over. The test fails when more restarts than the budget overlap in
// time, when a Node is not current at the end (within a bound the test
// derives and explains), when a Lease stays held, or when a hotplugd exits
// on its own.
//
// From the API server's own /metrics it reports hotplugd's requests per
// node and hour at idle by verb and resource (each attributed exactly:
// hotplugd's service account is classified by FlowSchemas of the test's
// own, one per verb and resource, on the priority level a DaemonSet's
// service account gets, and the API server counts each schema's requests),
// the heartbeat's share, the watches hotplugd keeps open, the API server's
// memory and CPU per node, the writes and the mutating requests' p99
// latency of a fleet-wide change against the Kubernetes scalability SLO,
// the time for the fleet to be current, and the machine's limits
// (hotplugd's memory, descriptors, threads, CPU).
//
// Processes, not in-process instances: each node is the binary operators
// run, with its own client-go (its own connection, watch, rate limiter and
// retries), its own inotify instances, lock and journal, and a SIGKILL is a
// real one. Only that measures what the API server sees from a fleet. The
// API server and etcd share the machine with the fleet, where a cluster
// gives them machines of their own: every hotplugd runs at nice 19 so that
// the fleet does not starve them, and its restart commands (the simulated
// kubelets) at the test's priority again.
//
// Settings come from the environment: HOTPLUGD_FLEET_NODES (50),
// HOTPLUGD_FLEET_BUDGET (2), HOTPLUGD_FLEET_KILLS (2), HOTPLUGD_FLEET_IDLE
// (30s) and HOTPLUGD_FLEET_REPORT (a markdown file for the results table;
// the table is logged always). The defaults are make test's smoke; make
// fleet runs 1000 nodes, a budget of 5, 25 kills and 10 minutes of idle.
// The test skips, saying why, when HOTPLUGD_KUBEBIN is not set
// (`export HOTPLUGD_KUBEBIN="$(hack/kubebin.sh)"`) or when not run as root.
// It fails at once, saying how many nodes fit, when the machine's limit on
// tasks (its pids cgroup, kernel.threads-max, kernel.pid_max) cannot hold
// the fleet: a hotplugd is about GOMAXPROCS + 6 threads, and a process that
// cannot create a thread dies, whoever's it is.
//
// On the host: it raises fs.inotify.max_user_instances (and
// max_user_watches) when the fleet needs more than they allow (every
// hotplugd holds two inotify instances, and root's limit is shared by all
// of them on one machine, where each real node has its own kernel),
// restoring the values in t.Cleanup; it makes itself the child subreaper,
// so that a restart command left running by a SIGKILLed hotplugd is
// reaped by the test rather than left a zombie under PID 1. Every process
// it starts is stopped by its PID. It never touches the machine's
// /var/lib/kubelet, /var/log/pods, hugepages or CPUs.
package fleet
