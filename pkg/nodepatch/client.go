package nodepatch

import (
	"bytes"
	"fmt"
	"net/http"
	"os"
	"runtime"
	"strconv"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/hotplugd/hotplugd/pkg/kubeclient"
)

// ClientOptions say how to reach the API server.
type ClientOptions struct {
	// Kubeconfig is a kubeconfig file; "" means in-cluster (the pod's
	// service account), then $KUBECONFIG.
	Kubeconfig string
	// QPS and Burst limit the client's request rate.
	QPS   float32
	Burst int
	// Version goes into the user agent: hotplugd/<version> (linux/amd64).
	Version string
	// Registerer gets hotplugd_api_requests_total; nil: not counted.
	Registerer prometheus.Registerer
}

// NewClient returns a client for opts, counting every request it makes
// by verb and status code.
func NewClient(o ClientOptions) (kubeclient.Interface, *rest.Config, error) {
	cfg, err := restConfig(o.Kubeconfig)
	if err != nil {
		return nil, nil, err
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	cfg.UserAgent = fmt.Sprintf("hotplugd/%s (%s/%s)", o.Version, runtime.GOOS, runtime.GOARCH)
	if o.Registerer != nil {
		requests := prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "hotplugd_api_requests_total",
			Help: "Requests to the Kubernetes API server, by verb (get, list, watch, patch, create, ...) and HTTP status code (\"error\" when none came back).",
		}, []string{"verb", "code"})
		if err := o.Registerer.Register(requests); err != nil {
			return nil, nil, fmt.Errorf("nodepatch: %w", err)
		}
		cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper { return countingTransport{rt, requests} })
	}
	c, err := kubeclient.NewForConfig(cfg)
	if err != nil {
		return nil, nil, fmt.Errorf("nodepatch: client: %w", err)
	}
	return c, cfg, nil
}

func restConfig(kubeconfig string) (*rest.Config, error) {
	if kubeconfig != "" {
		cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
		if err != nil {
			return nil, fmt.Errorf("nodepatch: kubeconfig %s: %w", kubeconfig, err)
		}
		return cfg, nil
	}
	cfg, err := rest.InClusterConfig()
	if err == nil {
		return cfg, nil
	}
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	cfg, kerr := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, nil).ClientConfig()
	if kerr != nil {
		return nil, fmt.Errorf("nodepatch: no API server: not in a pod (%v) and no kubeconfig (%v); give --kubeconfig, or --standalone to run without a cluster", err, kerr)
	}
	return cfg, nil
}

// countingTransport counts requests by verb and code.
type countingTransport struct {
	next     http.RoundTripper
	requests *prometheus.CounterVec
}

func (t countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	verb := Verb(req)
	resp, err := t.next.RoundTrip(req)
	code := "error"
	if err == nil {
		code = strconv.Itoa(resp.StatusCode)
	}
	t.requests.WithLabelValues(verb, code).Inc()
	return resp, err
}

// Verb is the Kubernetes verb of a request: watch and list for GETs of
// collections, get, create, update, patch, delete.
func Verb(req *http.Request) string {
	switch req.Method {
	case http.MethodGet:
		q := req.URL.Query()
		if q.Get("watch") == "true" || q.Get("watch") == "1" {
			return "watch"
		}
		if q.Has("fieldSelector") || q.Has("labelSelector") || q.Has("resourceVersionMatch") || q.Has("limit") {
			return "list"
		}
		return "get"
	case http.MethodPost:
		return "create"
	case http.MethodPut:
		return "update"
	case http.MethodPatch:
		return "patch"
	case http.MethodDelete:
		return "delete"
	}
	return req.Method
}

// WithTokenFile is cfg with its credentials replaced by the bearer token in
// path (client-go re-reads the file as it changes): the same server and CA,
// another identity. For the systemd unit's restart budget: the kubelet's
// credentials may write no Lease outside kube-node-lease (NodeRestriction),
// so the budget uses a token of the service account hotplugd bound to the
// Node (kubectl create token --bound-object-kind Node).
func WithTokenFile(cfg *rest.Config, path string) (*rest.Config, error) {
	b, err := os.ReadFile(path)
	switch {
	case err != nil:
		return nil, fmt.Errorf("nodepatch: the token file: %w", err)
	case len(bytes.TrimSpace(b)) == 0:
		return nil, fmt.Errorf("nodepatch: the token file %s is empty", path)
	}
	c := rest.AnonymousClientConfig(cfg)
	c.BearerTokenFile = path
	c.QPS, c.Burst, c.UserAgent = cfg.QPS, cfg.Burst, cfg.UserAgent
	c.WrapTransport = cfg.WrapTransport
	return c, nil
}
