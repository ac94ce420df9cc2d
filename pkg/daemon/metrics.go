package daemon

import (
	"runtime"
	"strings"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	v1 "k8s.io/api/core/v1"
)

// Metrics are the daemon's Prometheus metrics, on a registry of their own.
type Metrics struct {
	Registry *prometheus.Registry

	Uevents           *prometheus.CounterVec
	UeventOverflows   prometheus.Counter
	HugePageEvents    prometheus.Counter
	HugePageOverflows prometheus.Counter
	Reconciles        *prometheus.CounterVec
	ReconcileErrors   prometheus.Counter
	TopologyChanges   prometheus.Counter
	DetectionLatency  prometheus.Histogram
	ReconcileDuration prometheus.Histogram
	Capacity          *prometheus.GaugeVec
	LastReconcile     prometheus.Gauge
}

// NewMetrics creates and registers the metrics, with the Go runtime and
// process collectors.
func NewMetrics() *Metrics {
	m := &Metrics{
		Registry: prometheus.NewRegistry(),
		Uevents: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotplugd_uevents_total",
			Help: "Kernel uevents received for the cpu, memory and node subsystems, by subsystem and action.",
		}, []string{"subsystem", "action"}),
		UeventOverflows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hotplugd_uevent_overflows_total",
			Help: "Times uevents were lost (ENOBUFS or a SEQNUM gap); each forces a full re-read.",
		}),
		HugePageEvents: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hotplugd_hugepage_events_total",
			Help: "Writes seen on watched hugepage count files.",
		}),
		HugePageOverflows: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hotplugd_hugepage_watch_overflows_total",
			Help: "Times the hugepage file watch lost events (inotify queue overflow or watcher error); each forces a full re-read.",
		}),
		Reconciles: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotplugd_reconciles_total",
			Help: "Reconciles (snapshot and diff), by the trigger that opened the batch: start, uevent, hugepages, overflow, resync, sighup.",
		}, []string{"trigger"}),
		ReconcileErrors: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hotplugd_reconcile_errors_total",
			Help: "Reconciles that could not read the topology.",
		}),
		TopologyChanges: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "hotplugd_topology_changes_total",
			Help: "Reconciles that found the topology different from the previous snapshot.",
		}),
		DetectionLatency: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hotplugd_detection_latency_seconds",
			Help:    "Time from the first event of a burst to its snapshot being diffed (includes the quiet window).",
			Buckets: []float64{.01, .05, .1, .25, .5, .505, .51, .525, .55, .6, .75, 1, 2.5, 5, 10},
		}),
		ReconcileDuration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "hotplugd_reconcile_duration_seconds",
			Help:    "Time to take a snapshot and diff it.",
			Buckets: prometheus.ExponentialBuckets(0.0001, 2, 16),
		}),
		Capacity: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "hotplugd_capacity",
			Help: "Capacity a freshly started kubelet would report, by resource and unit (core for cpu, byte for memory and hugepages: the labels of kube-state-metrics' kube_node_status_capacity).",
		}, []string{"resource", "unit"}),
		LastReconcile: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "hotplugd_last_reconcile_timestamp_seconds",
			Help: "Unix time of the last successful reconcile.",
		}),
	}
	m.Registry.MustRegister(m.Uevents, m.UeventOverflows, m.HugePageEvents, m.HugePageOverflows, m.Reconciles, m.ReconcileErrors,
		m.TopologyChanges, m.DetectionLatency, m.ReconcileDuration, m.Capacity, m.LastReconcile,
		collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}))
	return m
}

// setCapacity sets the capacity gauges, removing resources that are gone.
func (m *Metrics) setCapacity(c v1.ResourceList) {
	m.Capacity.Reset()
	for name, q := range c {
		v := q.AsApproximateFloat64()
		m.Capacity.WithLabelValues(string(name), Unit(name)).Set(v)
	}
}

// Unit is kube-state-metrics' unit label of a resource, so that
// hotplugd_capacity joins kube_node_status_capacity on (resource, unit):
// core for cpu, byte for memory, hugepages and storage, integer otherwise.
func Unit(name v1.ResourceName) string {
	switch {
	case name == v1.ResourceCPU:
		return "core"
	case name == v1.ResourceMemory, name == v1.ResourceEphemeralStorage, name == v1.ResourceStorage,
		strings.HasPrefix(string(name), v1.ResourceHugePagesPrefix):
		return "byte"
	}
	return "integer"
}

// RegisterBuildInfo adds hotplugd_build_info{version,goversion} 1, the
// convention of Prometheus' own exporters.
func (m *Metrics) RegisterBuildInfo(version string) error {
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "hotplugd_build_info",
		Help: "1, labelled with hotplugd's version and the Go release it was built with.",
	}, []string{"version", "goversion"})
	g.WithLabelValues(version, runtime.Version()).Set(1)
	return m.Registry.Register(g)
}
