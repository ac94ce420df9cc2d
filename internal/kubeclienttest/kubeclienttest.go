package kubeclienttest

import (
	"k8s.io/client-go/kubernetes"

	"github.com/hotplugd/hotplugd/pkg/kubeclient"
)

// Clientset is c as a kubeclient.Interface.
func Clientset(c kubernetes.Interface) kubeclient.Interface { return clientset{c} }

// clientset is every group of kubeclient.Interface at once.
type clientset struct{ c kubernetes.Interface }

func (s clientset) CoreV1() kubeclient.CoreV1Interface                 { return s }
func (s clientset) AppsV1() kubeclient.AppsV1Interface                 { return s }
func (s clientset) CoordinationV1() kubeclient.CoordinationV1Interface { return s }

func (s clientset) Nodes() kubeclient.NodeInterface { return s.c.CoreV1().Nodes() }

func (s clientset) Events(namespace string) kubeclient.EventInterface {
	return s.c.CoreV1().Events(namespace)
}

func (s clientset) DaemonSets(namespace string) kubeclient.DaemonSetInterface {
	return s.c.AppsV1().DaemonSets(namespace)
}

func (s clientset) Leases(namespace string) kubeclient.LeaseInterface {
	return s.c.CoordinationV1().Leases(namespace)
}
