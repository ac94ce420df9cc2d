// Package kubeclienttest serves pkg/kubeclient's interfaces from a
// client-go clientset, for tests: a fake one (fake.NewClientset), or a real
// one of a test's API server with another identity. Only tests import it,
// so the daemon does not link client-go's Clientset (pkg/kubeclient says
// why).
package kubeclienttest
