package fleet

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	v1 "k8s.io/api/core/v1"
	flowcontrolv1 "k8s.io/api/flowcontrol/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/hotplugd/hotplugd/internal/kubeapitest"
	"github.com/hotplugd/hotplugd/pkg/nodepatch"
)

// The cluster as a DaemonSet's hotplugd finds it.
const (
	// budgetNamespace holds hotplugd's service account and the restart
	// budget's Leases.
	budgetNamespace = "hotplugd-system"
	serviceAccount  = "hotplugd"
	// kubeletVersion is every node's kubelet, on its Node and in
	// --kubelet-version.
	kubeletVersion = "v1.37.2"
	// priorityLevel is where the API server's default FlowSchema
	// (service-accounts) puts a service account's requests; the test's
	// FlowSchemas keep hotplugd's there, so that only the counting
	// differs from a cluster's.
	priorityLevel = "workload-low"
	// podsCapacity is what a kubelet reports for pods (maxPods' default),
	// which hotplugd leaves alone.
	podsCapacity = "110"
)

// hotplugd's requests are counted by FlowSchemas that match only its
// service account, one per verb and resource it may use, and one for
// anything else; the API server counts each schema's requests in
// apiserver_flowcontrol_dispatched_requests_total{flow_schema}. So the
// counts are hotplugd's exactly, whatever else the API server serves (its
// own loops, the harness).
var (
	classVerbs     = []string{"get", "list", "watch", "create", "update", "patch", "delete"}
	classResources = []string{"nodes", "nodes/status", "events", "leases"}
)

const (
	schemaPrefix = "hotplugd-fleet-"
	otherClass   = "other"
)

// requestClass is one verb and resource of hotplugd's requests, or
// otherClass.
type requestClass struct {
	verb, resource string
}

func (c requestClass) String() string {
	if c.verb == "" {
		return otherClass
	}
	return c.verb + " " + c.resource
}

func (c requestClass) schema() string {
	if c.verb == "" {
		return schemaPrefix + otherClass
	}
	return schemaPrefix + c.verb + "-" + strings.ReplaceAll(c.resource, "/", "-")
}

// writes: the verbs that change objects.
func (c requestClass) writes() bool {
	switch c.verb {
	case "create", "update", "patch", "delete":
		return true
	}
	return false
}

func requestClasses() []requestClass {
	var out []requestClass
	for _, r := range classResources {
		for _, v := range classVerbs {
			out = append(out, requestClass{v, r})
		}
	}
	return append(out, requestClass{})
}

// hotplugdRequests are hotplugd's requests over a window by class (those
// with none left out).
func hotplugdRequests(w window) map[requestClass]float64 {
	byName := map[string]requestClass{}
	for _, c := range requestClasses() {
		byName[c.schema()] = c
	}
	out := map[requestClass]float64{}
	for schema, n := range w.deltaBy(mDispatched, "flow_schema", func(l map[string]string) bool {
		return strings.HasPrefix(l["flow_schema"], schemaPrefix)
	}) {
		out[byName[schema]] += n
	}
	return out
}

// hotplugdRejected is how many of hotplugd's requests the API server's
// priority and fairness rejected (429) over the window.
func hotplugdRejected(w window) float64 {
	return w.delta(mRejected, func(l map[string]string) bool { return strings.HasPrefix(l["flow_schema"], schemaPrefix) })
}

// setupCluster makes what the DaemonSet's installation makes (the
// namespace, the service account, its permissions) and the FlowSchemas
// that count its requests, and returns a token of the service account.
// The service account is bound to cluster-admin: the test measures the
// API server's cost, not the RBAC manifests (test/components does).
func setupCluster(ctx context.Context, c kubernetes.Interface) (string, error) {
	if _, err := c.CoreV1().Namespaces().Create(ctx, &v1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: budgetNamespace}}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("fleet: namespace: %w", err)
	}
	if _, err := c.CoreV1().ServiceAccounts(budgetNamespace).Create(ctx, &v1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: serviceAccount}}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("fleet: service account: %w", err)
	}
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "hotplugd-fleet"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "cluster-admin"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Namespace: budgetNamespace, Name: serviceAccount}},
	}, metav1.CreateOptions{}); err != nil {
		return "", fmt.Errorf("fleet: cluster role binding: %w", err)
	}
	subject := []flowcontrolv1.Subject{{Kind: flowcontrolv1.SubjectKindServiceAccount,
		ServiceAccount: &flowcontrolv1.ServiceAccountSubject{Namespace: budgetNamespace, Name: serviceAccount}}}
	for _, class := range requestClasses() {
		rule := flowcontrolv1.PolicyRulesWithSubjects{Subjects: subject}
		// Before the API server's own schemas for service accounts
		// (service-accounts: 9000), after every system one.
		precedence := int32(1000)
		if class.verb == "" {
			precedence = 1001
			rule.ResourceRules = []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{"*"}, APIGroups: []string{"*"}, Resources: []string{"*"},
				ClusterScope: true, Namespaces: []string{"*"}}}
			rule.NonResourceRules = []flowcontrolv1.NonResourcePolicyRule{{Verbs: []string{"*"}, NonResourceURLs: []string{"*"}}}
		} else {
			rule.ResourceRules = []flowcontrolv1.ResourcePolicyRule{{Verbs: []string{class.verb}, APIGroups: []string{"*"},
				Resources: []string{class.resource}, ClusterScope: true, Namespaces: []string{"*"}}}
		}
		fs := &flowcontrolv1.FlowSchema{
			ObjectMeta: metav1.ObjectMeta{Name: class.schema()},
			Spec: flowcontrolv1.FlowSchemaSpec{
				PriorityLevelConfiguration: flowcontrolv1.PriorityLevelConfigurationReference{Name: priorityLevel},
				MatchingPrecedence:         precedence,
				DistinguisherMethod:        &flowcontrolv1.FlowDistinguisherMethod{Type: flowcontrolv1.FlowDistinguisherMethodByUserType},
				Rules:                      []flowcontrolv1.PolicyRulesWithSubjects{rule},
			},
		}
		if _, err := c.FlowcontrolV1().FlowSchemas().Create(ctx, fs, metav1.CreateOptions{}); err != nil {
			return "", fmt.Errorf("fleet: FlowSchema %s: %w", fs.Name, err)
		}
	}
	// Long enough for make fleet on a slow machine; the API server's
	// default maximum allows it.
	expiry := int64((48 * time.Hour).Seconds())
	tr, err := c.CoreV1().ServiceAccounts(budgetNamespace).CreateToken(ctx, serviceAccount,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("fleet: service account token: %w", err)
	}
	return tr.Status.Token, nil
}

// waitSchemas waits until the API server classifies the service account's
// requests by the test's FlowSchemas (its configuration controller applies
// new ones within moments): a GET of a Node that does not exist, as the
// service account, counted under hotplugd-fleet-get-nodes.
func waitSchemas(ctx context.Context, srv *kubeapitest.Server, token string, m *metricsClient) error {
	c, err := kubernetes.NewForConfig(srv.TokenConfig(token))
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	schema := requestClass{"get", "nodes"}.schema()
	deadline := time.Now().Add(30 * time.Second)
	for {
		c.CoreV1().Nodes().Get(ctx, "fleet-no-such-node", metav1.GetOptions{})
		s, err := m.scrape(ctx)
		if err != nil {
			return err
		}
		if s.sum(mDispatched, func(l map[string]string) bool { return l["flow_schema"] == schema }) > 0 {
			return nil
		}
		if time.Now().After(deadline) {
			return errors.New("fleet: the API server did not classify the service account's requests by the test's FlowSchemas within 30s")
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// registerNode creates a Node as a kubelet registers it: the Node, then
// its status with the kubelet's version, capacity and allocatable (and
// pods, which hotplugd leaves alone).
func registerNode(ctx context.Context, c kubernetes.Interface, name string, capacity, allocatable v1.ResourceList) error {
	if _, err := c.CoreV1().Nodes().Create(ctx, &v1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
		return fmt.Errorf("fleet: registering %s: %w", name, err)
	}
	capacity, allocatable = withPods(capacity), withPods(allocatable)
	b, err := json.Marshal(map[string]any{"status": map[string]any{
		"nodeInfo": map[string]any{"kubeletVersion": kubeletVersion}, "capacity": capacity, "allocatable": allocatable}})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("fleet: status of %s: %w", name, err)
	}
	return nil
}

// reportStatus puts capacity and allocatable on the Node's status, as a
// restarted kubelet does.
func reportStatus(ctx context.Context, c kubernetes.Interface, name string, capacity, allocatable v1.ResourceList) error {
	b, err := json.Marshal(map[string]any{"status": map[string]any{"capacity": withPods(capacity), "allocatable": withPods(allocatable)}})
	if err != nil {
		return fmt.Errorf("fleet: %w", err)
	}
	if _, err := c.CoreV1().Nodes().Patch(ctx, name, types.StrategicMergePatchType, b, metav1.PatchOptions{}, "status"); err != nil {
		return fmt.Errorf("fleet: status of %s: %w", name, err)
	}
	return nil
}

func withPods(l v1.ResourceList) v1.ResourceList {
	l = l.DeepCopy()
	l[v1.ResourcePods] = resource.MustParse(podsCapacity)
	return l
}

func conditionIs(status v1.ConditionStatus) func(*v1.Node) bool {
	return func(n *v1.Node) bool {
		c := nodepatch.FindCondition(n)
		return c != nil && c.Status == status
	}
}

func hasCondition(n *v1.Node) bool { return nodepatch.FindCondition(n) != nil }

// sameResources is whether the Node reports exactly want (pods aside).
func sameResources(got, want v1.ResourceList) bool {
	want = withPods(want)
	if len(got) != len(want) {
		return false
	}
	for k, q := range want {
		g, ok := got[k]
		if !ok || g.Cmp(q) != 0 {
			return false
		}
	}
	return true
}

// view follows every Node through one watch (an informer of the admin
// user: its requests are not hotplugd's) and tells when each first met a
// predicate. It makes no request while nothing waits: the idle window's
// only traffic is the watch's events.
type view struct {
	mu       sync.Mutex
	nodes    map[string]*v1.Node
	trackers []*tracker
}

// tracker records when each Node first met pred, since the tracker began.
type tracker struct {
	pred func(*v1.Node) bool
	seen map[string]time.Time // by Node name
	// changed is closed, and replaced, whenever a Node is seen.
	changed chan struct{}
}

func startView(ctx context.Context, c kubernetes.Interface) (*view, error) {
	v := &view{nodes: map[string]*v1.Node{}}
	f := informers.NewSharedInformerFactory(c, 0)
	inf := f.Core().V1().Nodes().Informer()
	update := func(obj any) {
		n, ok := obj.(*v1.Node)
		if !ok {
			return
		}
		now := time.Now()
		v.mu.Lock()
		defer v.mu.Unlock()
		v.nodes[n.Name] = n
		for _, tr := range v.trackers {
			tr.offer(n, now)
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    update,
		UpdateFunc: func(_, obj any) { update(obj) },
	}); err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	f.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		return nil, errors.New("fleet: the Node informer did not sync")
	}
	return v, nil
}

func (tr *tracker) offer(n *v1.Node, now time.Time) {
	if _, ok := tr.seen[n.Name]; ok || !tr.pred(n) {
		return
	}
	tr.seen[n.Name] = now
	close(tr.changed)
	tr.changed = make(chan struct{})
}

// track starts recording when Nodes meet pred, from now on (those that
// meet it now are seen now).
func (v *view) track(pred func(*v1.Node) bool) *tracker {
	tr := &tracker{pred: pred, seen: map[string]time.Time{}, changed: make(chan struct{})}
	now := time.Now()
	v.mu.Lock()
	defer v.mu.Unlock()
	for _, n := range v.nodes {
		tr.offer(n, now)
	}
	v.trackers = append(v.trackers, tr)
	return tr
}

// untrack stops tr (what it saw stays readable).
func (v *view) untrack(tr *tracker) {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.trackers = slices.DeleteFunc(v.trackers, func(x *tracker) bool { return x == tr })
}

// waitNames waits until every one of names has been seen, or the deadline
// or done; it returns the names not seen.
func (v *view) waitNames(tr *tracker, names []string, deadline time.Time, done <-chan struct{}) []string {
	timer := time.NewTimer(time.Until(deadline))
	defer timer.Stop()
	for {
		v.mu.Lock()
		var missing []string
		for _, n := range names {
			if _, ok := tr.seen[n]; !ok {
				missing = append(missing, n)
			}
		}
		changed := tr.changed
		v.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-changed:
		case <-timer.C:
			return missing
		case <-done:
			return missing
		}
	}
}

// seenTimes is a copy of when each Node was seen.
func (v *view) seenTimes(tr *tracker) map[string]time.Time {
	v.mu.Lock()
	defer v.mu.Unlock()
	return maps.Clone(tr.seen)
}

// count is how many Nodes tr has seen.
func (v *view) count(tr *tracker) int {
	v.mu.Lock()
	defer v.mu.Unlock()
	return len(tr.seen)
}

// node is the latest Node seen by that name (nil when none).
func (v *view) node(name string) *v1.Node {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.nodes[name]
}

// describe says what a Node shows, for failures.
func describe(n *v1.Node) string {
	if n == nil {
		return "no Node"
	}
	s := "capacity " + nodepatch.FormatResources(n.Status.Capacity)
	if c := nodepatch.FindCondition(n); c != nil {
		s += fmt.Sprintf("; %s %s (%s): %s", c.Type, c.Status, c.Reason, c.Message)
	} else {
		s += "; no " + string(nodepatch.ConditionType) + " condition"
	}
	return s
}
