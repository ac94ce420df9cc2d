package kubeapitest

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Resources finds the dynamic client of a manifest's object by the API
// server's discovery, read once by NewResources: what applying a kustomize
// build or a directory of manifests needs.
type Resources struct {
	mapper meta.RESTMapper
	dyn    dynamic.Interface
}

// NewResources reads the server's API groups with cfg and returns clients
// of cfg for them.
func NewResources(cfg *rest.Config) (*Resources, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeapitest: %w", err)
	}
	groups, err := restmapper.GetAPIGroupResources(dc)
	if err != nil {
		return nil, fmt.Errorf("kubeapitest: discovery: %w", err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, fmt.Errorf("kubeapitest: %w", err)
	}
	return &Resources{mapper: restmapper.NewDiscoveryRESTMapper(groups), dyn: dyn}, nil
}

// For returns the client of obj's resource, in obj's namespace when the
// resource is namespaced (an object without one is an error), and how to
// name obj in messages: "Kind name" or "Kind namespace/name".
func (r *Resources) For(obj *unstructured.Unstructured) (dynamic.ResourceInterface, string, error) {
	gvk := obj.GroupVersionKind()
	id := gvk.Kind + " " + obj.GetName()
	m, err := r.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return nil, id, fmt.Errorf("kubeapitest: %s: %w", id, err)
	}
	if m.Scope.Name() != meta.RESTScopeNameNamespace {
		return r.dyn.Resource(m.Resource), id, nil
	}
	id = gvk.Kind + " " + obj.GetNamespace() + "/" + obj.GetName()
	if obj.GetNamespace() == "" {
		return nil, id, fmt.Errorf("kubeapitest: %s: no namespace in the manifest", id)
	}
	return r.dyn.Resource(m.Resource).Namespace(obj.GetNamespace()), id, nil
}
