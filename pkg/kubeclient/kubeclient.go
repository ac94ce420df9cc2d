package kubeclient

import (
	"context"
	"errors"
	"fmt"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/flowcontrol"
)

// Interface is the part of the API hotplugd uses, by group, as client-go's
// kubernetes.Interface has it.
type Interface interface {
	CoreV1() CoreV1Interface
	AppsV1() AppsV1Interface
	CoordinationV1() CoordinationV1Interface
}

// CoreV1Interface has the core/v1 resources hotplugd uses.
type CoreV1Interface interface {
	Nodes() NodeInterface
	Events(namespace string) EventInterface
}

// AppsV1Interface has the apps/v1 resources hotplugd uses.
type AppsV1Interface interface {
	DaemonSets(namespace string) DaemonSetInterface
}

// CoordinationV1Interface has the coordination.k8s.io/v1 resources
// hotplugd uses.
type CoordinationV1Interface interface {
	Leases(namespace string) LeaseInterface
}

// NodeInterface reads, watches and patches Nodes: the daemon's own Node.
type NodeInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*v1.Node, error)
	List(ctx context.Context, opts metav1.ListOptions) (*v1.NodeList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
	Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (*v1.Node, error)
}

// EventInterface writes Events into the namespace of each Event, as
// client-go's event recorder sends them: a new one, or a patch of one sent
// before (its count).
type EventInterface interface {
	CreateWithEventNamespaceWithContext(ctx context.Context, event *v1.Event) (*v1.Event, error)
	PatchWithEventNamespaceWithContext(ctx context.Context, event *v1.Event, data []byte) (*v1.Event, error)
}

// DaemonSetInterface reads and watches DaemonSets: the one that installed
// hotplugd (removal) and the one that pauses it (pause).
type DaemonSetInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*appsv1.DaemonSet, error)
	List(ctx context.Context, opts metav1.ListOptions) (*appsv1.DaemonSetList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// LeaseInterface reads and writes Leases: the restart budget's.
type LeaseInterface interface {
	Get(ctx context.Context, name string, opts metav1.GetOptions) (*coordinationv1.Lease, error)
	List(ctx context.Context, opts metav1.ListOptions) (*coordinationv1.LeaseList, error)
	Create(ctx context.Context, lease *coordinationv1.Lease, opts metav1.CreateOptions) (*coordinationv1.Lease, error)
	Update(ctx context.Context, lease *coordinationv1.Lease, opts metav1.UpdateOptions) (*coordinationv1.Lease, error)
}

// NewForConfig returns the client for c. As client-go's
// kubernetes.NewForConfig: its groups share one HTTP client and one rate
// limiter (c.QPS and c.Burst, unless c.RateLimiter is set), and the user
// agent is client-go's default when c has none.
func NewForConfig(c *rest.Config) (Interface, error) {
	cfg := *c
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	httpClient, err := rest.HTTPClientFor(&cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeclient: %w", err)
	}
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, errors.New("kubeclient: a burst greater than 0 is required with a QPS")
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	scheme := runtime.NewScheme()
	metav1.AddToGroupVersion(scheme, schema.GroupVersion{Version: "v1"})
	for _, add := range []func(*runtime.Scheme) error{v1.AddToScheme, appsv1.AddToScheme, coordinationv1.AddToScheme} {
		if err := add(scheme); err != nil {
			return nil, fmt.Errorf("kubeclient: %w", err)
		}
	}
	codecs := rest.CodecFactoryForGeneratedClient(scheme, serializer.NewCodecFactory(scheme)).WithoutConversion()
	cl := &client{params: runtime.NewParameterCodec(scheme)}
	for _, g := range []struct {
		rc   **rest.RESTClient
		path string
		gv   schema.GroupVersion
	}{
		{&cl.core, "/api", v1.SchemeGroupVersion},
		{&cl.apps, "/apis", appsv1.SchemeGroupVersion},
		{&cl.coordination, "/apis", coordinationv1.SchemeGroupVersion},
	} {
		gc := cfg
		gc.GroupVersion, gc.APIPath, gc.NegotiatedSerializer = &g.gv, g.path, codecs
		if *g.rc, err = rest.RESTClientForConfigAndClient(&gc, httpClient); err != nil {
			return nil, fmt.Errorf("kubeclient: %s: %w", g.gv, err)
		}
	}
	return cl, nil
}

// client is one REST client per group, with a typed client per resource
// on top, as client-go's generated clients are made.
type client struct {
	core, apps, coordination *rest.RESTClient
	params                   runtime.ParameterCodec
}

func (c *client) CoreV1() CoreV1Interface                 { return coreV1{c} }
func (c *client) AppsV1() AppsV1Interface                 { return appsV1{c} }
func (c *client) CoordinationV1() CoordinationV1Interface { return coordinationV1{c} }

type coreV1 struct{ c *client }

func (g coreV1) Nodes() NodeInterface {
	return &typed[*v1.Node, *v1.NodeList]{g.c.core, g.c.params, "nodes", "",
		func() *v1.Node { return &v1.Node{} }, func() *v1.NodeList { return &v1.NodeList{} }}
}

func (g coreV1) Events(namespace string) EventInterface {
	return events{&typed[*v1.Event, *v1.EventList]{g.c.core, g.c.params, "events", namespace,
		func() *v1.Event { return &v1.Event{} }, func() *v1.EventList { return &v1.EventList{} }}}
}

type appsV1 struct{ c *client }

func (g appsV1) DaemonSets(namespace string) DaemonSetInterface {
	return &typed[*appsv1.DaemonSet, *appsv1.DaemonSetList]{g.c.apps, g.c.params, "daemonsets", namespace,
		func() *appsv1.DaemonSet { return &appsv1.DaemonSet{} }, func() *appsv1.DaemonSetList { return &appsv1.DaemonSetList{} }}
}

type coordinationV1 struct{ c *client }

func (g coordinationV1) Leases(namespace string) LeaseInterface {
	return &typed[*coordinationv1.Lease, *coordinationv1.LeaseList]{g.c.coordination, g.c.params, "leases", namespace,
		func() *coordinationv1.Lease { return &coordinationv1.Lease{} }, func() *coordinationv1.LeaseList { return &coordinationv1.LeaseList{} }}
}

// typed is the typed client of one resource: the requests of client-go's
// generic gentype.Client for a built-in type (which prefers protobuf).
// Not gentype itself: its package also holds client-go's fake clients,
// which link client-go's object tracker, structured-merge-diff's typed
// objects and the managed fields into the daemon (about 0.7 MiB of its RSS
// at start).
type typed[T interface {
	runtime.Object
	GetName() string
}, L runtime.Object] struct {
	client    rest.Interface
	params    runtime.ParameterCodec
	resource  string
	namespace string // "" for a cluster-scoped resource
	newObject func() T
	newList   func() L
}

func (c *typed[T, L]) Get(ctx context.Context, name string, opts metav1.GetOptions) (T, error) {
	result := c.newObject()
	err := c.client.Get().
		UseProtobufAsDefault().
		NamespaceIfScoped(c.namespace, c.namespace != "").
		Resource(c.resource).
		Name(name).
		VersionedParams(&opts, c.params).
		Do(ctx).
		Into(result)
	return result, err
}

func (c *typed[T, L]) List(ctx context.Context, opts metav1.ListOptions) (L, error) {
	result := c.newList()
	err := c.client.Get().
		UseProtobufAsDefault().
		NamespaceIfScoped(c.namespace, c.namespace != "").
		Resource(c.resource).
		VersionedParams(&opts, c.params).
		Timeout(timeout(opts)).
		Do(ctx).
		Into(result)
	return result, err
}

func (c *typed[T, L]) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return c.client.Get().
		UseProtobufAsDefault().
		NamespaceIfScoped(c.namespace, c.namespace != "").
		Resource(c.resource).
		VersionedParams(&opts, c.params).
		Timeout(timeout(opts)).
		Watch(ctx)
}

func (c *typed[T, L]) Create(ctx context.Context, obj T, opts metav1.CreateOptions) (T, error) {
	result := c.newObject()
	err := c.client.Post().
		UseProtobufAsDefault().
		NamespaceIfScoped(c.namespace, c.namespace != "").
		Resource(c.resource).
		VersionedParams(&opts, c.params).
		Body(obj).
		Do(ctx).
		Into(result)
	return result, err
}

func (c *typed[T, L]) Update(ctx context.Context, obj T, opts metav1.UpdateOptions) (T, error) {
	result := c.newObject()
	err := c.client.Put().
		UseProtobufAsDefault().
		NamespaceIfScoped(c.namespace, c.namespace != "").
		Resource(c.resource).
		Name(obj.GetName()).
		VersionedParams(&opts, c.params).
		Body(obj).
		Do(ctx).
		Into(result)
	return result, err
}

func (c *typed[T, L]) Patch(ctx context.Context, name string, pt types.PatchType, data []byte, opts metav1.PatchOptions, subresources ...string) (T, error) {
	result := c.newObject()
	err := c.client.Patch(pt).
		UseProtobufAsDefault().
		NamespaceIfScoped(c.namespace, c.namespace != "").
		Resource(c.resource).
		Name(name).
		SubResource(subresources...).
		VersionedParams(&opts, c.params).
		Body(data).
		Do(ctx).
		Into(result)
	return result, err
}

// timeout is a list's or a watch's TimeoutSeconds.
func timeout(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}

// events is client-go's events expansion (typed/core/v1/event_expansion.go):
// each Event written into its own namespace.
type events struct {
	*typed[*v1.Event, *v1.EventList]
}

func (e events) CreateWithEventNamespaceWithContext(ctx context.Context, event *v1.Event) (*v1.Event, error) {
	if err := e.check(event); err != nil {
		return nil, err
	}
	result := &v1.Event{}
	err := e.client.Post().
		NamespaceIfScoped(event.Namespace, len(event.Namespace) > 0).
		Resource("events").
		Body(event).
		Do(ctx).
		Into(result)
	return result, err
}

func (e events) PatchWithEventNamespaceWithContext(ctx context.Context, event *v1.Event, data []byte) (*v1.Event, error) {
	if err := e.check(event); err != nil {
		return nil, err
	}
	result := &v1.Event{}
	err := e.client.Patch(types.StrategicMergePatchType).
		NamespaceIfScoped(event.Namespace, len(event.Namespace) > 0).
		Resource("events").
		Name(event.Name).
		Body(data).
		Do(ctx).
		Into(result)
	return result, err
}

// check refuses an Event of another namespace than a namespaced client's.
func (e events) check(event *v1.Event) error {
	if e.namespace != "" && event.Namespace != e.namespace {
		return fmt.Errorf("kubeclient: an event of namespace %q in namespace %q", event.Namespace, e.namespace)
	}
	return nil
}
