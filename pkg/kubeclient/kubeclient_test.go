package kubeclient_test

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os/exec"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	coordinationv1 "k8s.io/api/coordination/v1"
	v1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/hotplugd/hotplugd/internal/kubeclienttest"
	"github.com/hotplugd/hotplugd/pkg/kubeclient"
)

// request is what the API server saw of one call; Accept is compared with
// client-go's only (a read asks for protobuf first, which is what keeps
// the decoding of Nodes in the daemon small).
type request struct {
	Method, Path, Query, ContentType, Body string
	Accept                                 string
}

// apiServer records the requests it gets and answers each with an object
// of the kind and name in its path (a list for a collection's GET), in
// JSON.
func apiServer(t *testing.T) (*httptest.Server, *[]request) {
	var got []request
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got = append(got, request{r.Method, r.URL.Path, r.URL.RawQuery, r.Header.Get("Content-Type"), string(body), r.Header.Get("Accept")})
		if ua := r.Header.Get("User-Agent"); ua != "hotplugd/test" {
			t.Errorf("%s %s: user agent %q, want hotplugd/test", r.Method, r.URL.Path, ua)
		}
		kinds := map[string][2]string{"nodes": {"v1", "Node"}, "events": {"v1", "Event"},
			"daemonsets": {"apps/v1", "DaemonSet"}, "leases": {"coordination.k8s.io/v1", "Lease"}}
		obj := map[string]any{}
		parts := strings.Split(r.URL.Path, "/")
		for i, p := range parts {
			k, ok := kinds[p]
			if !ok {
				continue
			}
			obj["apiVersion"] = k[0]
			switch {
			case i+1 < len(parts):
				obj["kind"], obj["metadata"] = k[1], map[string]any{"name": parts[i+1]}
			case r.Method == http.MethodPost:
				obj["kind"], obj["metadata"] = k[1], map[string]any{"name": "created"}
			default:
				obj["kind"], obj["items"] = k[1]+"List", []any{map[string]any{"metadata": map[string]any{"name": "one"}}}
			}
		}
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(obj)
	}))
	t.Cleanup(srv.Close)
	return srv, &got
}

// TestClient: each call hotplugd makes sends what client-go's Clientset
// sends for it (the same method, URL, content type and body: protobuf for
// the typed objects, the patch's own type for a patch), to the URL
// expected, and decodes the answer.
func TestClient(t *testing.T) {
	srv, got := apiServer(t)
	cfg := &rest.Config{Host: srv.URL, QPS: 100, Burst: 100, UserAgent: "hotplugd/test"}
	c, err := kubeclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	clientGo := kubeclienttest.Clientset(cs)
	ctx := context.Background()
	ev := &v1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "n1.1"}, Reason: "CapacityDrift"}
	for _, tc := range []struct {
		name string
		call func(kubeclient.Interface) (string, error) // the answered object's name
		want request                                    // its Body: "" for a protobuf or an Event's JSON
	}{
		{"get node", func(c kubeclient.Interface) (string, error) {
			n, err := c.CoreV1().Nodes().Get(ctx, "n1", metav1.GetOptions{})
			return n.Name, err
		}, request{"GET", "/api/v1/nodes/n1", "", "", "", ""}},
		{"list nodes", func(c kubeclient.Interface) (string, error) {
			l, err := c.CoreV1().Nodes().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=n1"})
			return l.Items[0].Name, err
		}, request{"GET", "/api/v1/nodes", "fieldSelector=metadata.name%3Dn1", "", "", ""}},
		{"watch nodes", func(c kubeclient.Interface) (string, error) {
			w, err := c.CoreV1().Nodes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=n1", ResourceVersion: "5", TimeoutSeconds: ptr.To[int64](30)})
			if err != nil {
				return "", err
			}
			w.Stop()
			return "(a watch)", nil
		}, request{"GET", "/api/v1/nodes", "fieldSelector=metadata.name%3Dn1&resourceVersion=5&timeout=30s&timeoutSeconds=30&watch=true", "", "", ""}},
		{"patch node status", func(c kubeclient.Interface) (string, error) {
			n, err := c.CoreV1().Nodes().Patch(ctx, "n1", types.StrategicMergePatchType, []byte(`{"status":{}}`), metav1.PatchOptions{FieldManager: "hotplugd"}, "status")
			return n.Name, err
		}, request{"PATCH", "/api/v1/nodes/n1/status", "fieldManager=hotplugd", "application/strategic-merge-patch+json", `{"status":{}}`, ""}},
		{"create event", func(c kubeclient.Interface) (string, error) {
			e, err := c.CoreV1().Events("").CreateWithEventNamespaceWithContext(ctx, ev)
			return e.Name, err
		}, request{"POST", "/api/v1/namespaces/default/events", "", "application/json", "", ""}},
		{"patch event", func(c kubeclient.Interface) (string, error) {
			e, err := c.CoreV1().Events("").PatchWithEventNamespaceWithContext(ctx, ev, []byte(`{"count":2}`))
			return e.Name, err
		}, request{"PATCH", "/api/v1/namespaces/default/events/n1.1", "", "application/strategic-merge-patch+json", `{"count":2}`, ""}},
		{"get daemonset", func(c kubeclient.Interface) (string, error) {
			d, err := c.AppsV1().DaemonSets("hotplugd-system").Get(ctx, "hotplugd", metav1.GetOptions{})
			return d.Name, err
		}, request{"GET", "/apis/apps/v1/namespaces/hotplugd-system/daemonsets/hotplugd", "", "", "", ""}},
		{"list daemonsets", func(c kubeclient.Interface) (string, error) {
			l, err := c.AppsV1().DaemonSets("hotplugd-system").List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=hotplugd"})
			return l.Items[0].Name, err
		}, request{"GET", "/apis/apps/v1/namespaces/hotplugd-system/daemonsets", "fieldSelector=metadata.name%3Dhotplugd", "", "", ""}},
		{"get lease", func(c kubeclient.Interface) (string, error) {
			l, err := c.CoordinationV1().Leases("ns").Get(ctx, "r-0", metav1.GetOptions{})
			return l.Name, err
		}, request{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/r-0", "", "", "", ""}},
		{"list leases", func(c kubeclient.Interface) (string, error) {
			l, err := c.CoordinationV1().Leases("ns").List(ctx, metav1.ListOptions{LabelSelector: "a=b"})
			return l.Items[0].Name, err
		}, request{"GET", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "labelSelector=a%3Db", "", "", ""}},
		{"create lease", func(c kubeclient.Interface) (string, error) {
			l, err := c.CoordinationV1().Leases("ns").Create(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "r-0"}}, metav1.CreateOptions{})
			return l.Name, err
		}, request{"POST", "/apis/coordination.k8s.io/v1/namespaces/ns/leases", "", "application/vnd.kubernetes.protobuf", "", ""}},
		{"update lease", func(c kubeclient.Interface) (string, error) {
			l, err := c.CoordinationV1().Leases("ns").Update(ctx, &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: "r-0"}}, metav1.UpdateOptions{})
			return l.Name, err
		}, request{"PUT", "/apis/coordination.k8s.io/v1/namespaces/ns/leases/r-0", "", "application/vnd.kubernetes.protobuf", "", ""}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			*got = nil
			if _, err := tc.call(clientGo); err != nil {
				t.Fatalf("client-go: %v", err)
			}
			oracle := *got
			*got = nil
			name, err := tc.call(c)
			if err != nil {
				t.Fatal(err)
			}
			if name == "" {
				t.Error("the answer was not decoded: no name")
			}
			if diff := cmp.Diff(oracle, *got); diff != "" {
				t.Errorf("requests unlike client-go's (-client-go +kubeclient):\n%s", diff)
			}
			if len(*got) == 1 && tc.want.Body == "" {
				(*got)[0].Body = ""
			}
			for i := range *got {
				(*got)[i].Accept = ""
			}
			if diff := cmp.Diff([]request{tc.want}, *got); diff != "" {
				t.Errorf("requests (-want +got):\n%s", diff)
			}
		})
	}
}

// TestEventNamespace: a namespaced events client refuses an Event of
// another namespace, as client-go's does.
func TestEventNamespace(t *testing.T) {
	c, err := kubeclient.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.CoreV1().Events("a").CreateWithEventNamespaceWithContext(context.Background(), &v1.Event{ObjectMeta: metav1.ObjectMeta{Namespace: "b"}})
	if err == nil || !strings.Contains(err.Error(), `namespace "b" in namespace "a"`) {
		t.Errorf("got %v, want the namespaces refused", err)
	}
}

// TestDaemonLinksNoClientset: the daemon does not link client-go's
// Clientset, its scheme or the API groups it registers, nor gentype and
// the fake clients' machinery, nor tools/record's strategic merge patch
// and OpenAPI models (the package doc says why): of k8s.io/api,
// only the groups this client serves.
func TestDaemonLinksNoClientset(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "../../cmd/hotplugd").Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	allowed := map[string]bool{"k8s.io/api/core/v1": true, "k8s.io/api/apps/v1": true, "k8s.io/api/coordination/v1": true}
	var bad []string
	for _, p := range strings.Fields(string(out)) {
		switch {
		case strings.HasPrefix(p, "k8s.io/client-go/kubernetes"),
			strings.HasPrefix(p, "k8s.io/client-go/tools/leaderelection"),
			strings.HasPrefix(p, "k8s.io/client-go/discovery"),
			p == "k8s.io/client-go/gentype", p == "k8s.io/client-go/testing",
			strings.HasPrefix(p, "k8s.io/client-go/tools/record"), strings.HasPrefix(p, "k8s.io/client-go/tools/events"),
			p == "k8s.io/apimachinery/pkg/util/strategicpatch",
			strings.HasPrefix(p, "k8s.io/kube-openapi/") && p != "k8s.io/kube-openapi/pkg/util", // OpenAPI models; its util is small
			strings.HasPrefix(p, "k8s.io/api/") && !allowed[p]:
			bad = append(bad, p)
		}
	}
	if len(bad) > 0 {
		t.Errorf("cmd/hotplugd links %s: each costs resident memory at every start (pkg/kubeclient)", strings.Join(bad, ", "))
	}
}
