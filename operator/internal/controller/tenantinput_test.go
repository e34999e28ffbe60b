package controller_test

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"testing"
	"time"

	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/kubernetes"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/yaml"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/operator/helmrecord"
	"github.com/titanml/inference-stack-operator/operator/internal/controller"
	"github.com/titanml/inference-stack-operator/operator/podsecurity/podsecuritytest"
)

// What a tenant with edit in a stack's namespace can write and the
// operator reads: release records. The operator here runs with the
// cluster's admin credentials, more than its ClusterRole gives, so any
// object it could be made to touch outside the stack would show.
func TestTenantWrittenReleaseRecords(t *testing.T) {
	e := startEnv(t, operatorBuild{opts: controller.Options{UnclaimedGrace: 2 * time.Second}})
	ctx := t.Context()
	cs := kubernetes.NewForConfigOrDie(e.cluster.RESTConfig())
	// Where the majors run, as the catalog chart writes it (before the
	// operator reads it, at its first release).
	e.annotateCRD(inferencestack.OperatorNamespacesAnnotation,
		fmt.Sprintf(`{"v0":%q,"v1":%q}`, inferencestack.Namespace("v0"), inferencestack.Namespace("v1")))

	// What must survive: objects of another namespace, a cluster-scoped
	// one, and objects of the stack's own namespace that the stack does
	// not control (the platform's, another stack's).
	if err := e.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "victim"}}); err != nil {
		t.Fatal(err)
	}
	precious := []client.Object{
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "precious", Namespace: "victim"}, Data: map[string]string{"k": "v"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "listed", Namespace: "victim"}, Data: map[string]string{"k": "v"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "folded", Namespace: "victim"}, Data: map[string]string{"k": "v"}},
		&corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "platform", Namespace: "victim"}},
		&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "platform-settings", Namespace: ns,
			Labels:      map[string]string{"app.kubernetes.io/managed-by": "Helm"},
			Annotations: map[string]string{"meta.helm.sh/release-name": "forged", "meta.helm.sh/release-namespace": ns}}},
	}
	for _, o := range precious {
		if err := e.cl.Create(ctx, o); err != nil {
			t.Fatal(err)
		}
	}
	e.apply("neighbour", "v0", `{applications: {a: {}}}`)
	e.waitDeployed("neighbour")
	precious = append(precious, e.deployment("neighbour-inference-stack-a"))

	// Manifests Helm reads otherwise than a re-parse would: a document
	// with items is a List to Helm's builder, whose items carry their own
	// kind and namespace; a key spelt with U+017F (ſ) is "namespace" to a
	// case-folding parser, nothing to Helm's.
	const readOtherwise = `
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: decoy
items:
- apiVersion: v1
  kind: ConfigMap
  metadata:
    name: listed
    namespace: victim
- apiVersion: v1
  kind: ServiceAccount
  metadata:
    name: platform
    namespace: victim
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: folded
  namespace: victim
  nameſpace: default
`
	// Objects of the stack's namespace the stack does not control: of the
	// chart's kinds and namespace, they pass every check of the record,
	// and are held where Helm acts.
	const ownNamespace = `
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: platform-settings
---
apiVersion: apps/v1
kind: Deployment
metadata:
  name: neighbour-inference-stack-a
`
	// Objects named outright in other namespaces, or of other kinds.
	const outrightObjects = `
---
apiVersion: v1
kind: ConfigMap
metadata:
  name: precious
  namespace: victim
---
apiVersion: rbac.authorization.k8s.io/v1
kind: ClusterRole
metadata:
  name: system:kube-scheduler
`
	survivors := func(ctx context.Context) []string {
		var gone []string
		for _, o := range precious {
			c := o.DeepCopyObject().(client.Object)
			if err := e.cl.Get(ctx, client.ObjectKeyFromObject(o), c); err != nil || c.GetUID() != o.GetUID() {
				gone = append(gone, fmt.Sprintf("%T %s/%s (%v)", o, o.GetNamespace(), o.GetName(), err))
			}
		}
		if err := e.cl.Get(ctx, client.ObjectKey{Name: "system:kube-scheduler"}, &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "rbac.authorization.k8s.io/v1", "kind": "ClusterRole"}}); err != nil {
			gone = append(gone, fmt.Sprintf("ClusterRole system:kube-scheduler (%v)", err))
		}
		return gone
	}
	// A tenant's records are not signed (see the subtests at the end);
	// these forgeries are, with the key of the operator's major, as if it
	// had leaked: what holds Helm to the stack must hold without it.
	keys := testKeys(cs)
	secrets := helmrecord.NewSecrets(cs.CoreV1().Secrets(ns), nil).WithKeys(keys, ns, nil)
	// forge writes the stack's next revision as deployed, its manifest
	// the stack's own plus objects, marking the one before superseded:
	// what a tenant can do with Helm's own library.
	forge := func(stack, objects string) {
		t.Helper()
		rels, err := secrets.Query(map[string]string{"name": stack, "owner": "helm"})
		if err != nil {
			t.Fatal(err)
		}
		last := rels[0]
		for _, r := range rels {
			if r.Version > last.Version {
				last = r
			}
		}
		last.Info.Status = release.StatusSuperseded
		if err := secrets.Update(fmt.Sprintf("sh.helm.release.v1.%s.v%d", stack, last.Version), last); err != nil {
			t.Fatal(err)
		}
		next := *last
		next.Version++
		next.Info = &release.Info{Status: release.StatusDeployed, FirstDeployed: last.Info.FirstDeployed, LastDeployed: last.Info.LastDeployed}
		next.Manifest = last.Manifest + objects
		if err := secrets.Create(fmt.Sprintf("sh.helm.release.v1.%s.v%d", stack, next.Version), &next); err != nil {
			t.Fatal(err)
		}
	}

	// failsSaying waits until a condition of stack says all of says.
	failsSaying := func(stack string, says ...string) {
		e.t.Helper()
		e.eventually(stack+" says why its release fails", 60*time.Second, func(ctx context.Context) (bool, string) {
			conds, _, _ := unstructured.NestedSlice(e.getStack(stack).Object, "status", "conditions")
			for _, c := range conds {
				m, _ := c.(map[string]any)["message"].(string)
				if !slices.ContainsFunc(says, func(s string) bool { return !strings.Contains(m, s) }) {
					return true, ""
				}
			}
			return false, fmt.Sprint(conds)
		})
	}

	t.Run("an upgrade from a forged revision changes nothing outside the stack", func(t *testing.T) {
		e.t = t
		e.apply("forged", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("forged")
		forge("forged", ownNamespace)
		// A new generation: Helm upgrades from the forged revision,
		// deleting what it lists that the new render does not have.
		replicas(e, "forged", 2)
		e.waitDeployedAtGeneration("forged")
		if gone := survivors(ctx); len(gone) > 0 {
			t.Fatalf("an upgrade from a forged revision deleted or replaced %v", gone)
		}
		e.eventually("an OutsideTheStack event on the stack", 30*time.Second, func(ctx context.Context) (bool, string) {
			ev, ok := hasEvent(e.events("forged"), "OutsideTheStack")
			return ok, ev.Message
		})
	})

	t.Run("a revision read otherwise by a re-parse, or naming other namespaces and kinds, is refused whole", func(t *testing.T) {
		e.t = t
		forge("forged", readOtherwise+outrightObjects)
		replicas(e, "forged", 3)
		failsSaying("forged", "refusing to act on release forged")
		if gone := survivors(ctx); len(gone) > 0 {
			t.Fatalf("a refused revision deleted or replaced %v", gone)
		}
		// The message names the Secret to delete; deleting it lets the
		// stack go on.
		rels, err := secrets.Query(map[string]string{"name": "forged", "owner": "helm", "status": "deployed"})
		if err != nil || len(rels) != 1 {
			t.Fatalf("the forged revision: %v, %v", rels, err)
		}
		if _, err := secrets.Delete(fmt.Sprintf("sh.helm.release.v1.forged.v%d", rels[0].Version)); err != nil {
			t.Fatal(err)
		}
		e.waitDeployedAtGeneration("forged")
	})

	t.Run("an uninstall of a forged revision deletes only the stack's own objects, and completes", func(t *testing.T) {
		e.t = t
		forge("forged", ownNamespace)
		e.deleteAndWait("forged")
		e.eventually("the stack's own objects gone", 60*time.Second, func(ctx context.Context) (bool, string) {
			err := e.cl.Get(ctx, client.ObjectKey{Namespace: ns, Name: "forged-inference-stack-a"}, &appsv1.Deployment{})
			return apierrors.IsNotFound(err), fmt.Sprintf("Deployment forged-inference-stack-a: %v", err)
		})
		if gone := survivors(ctx); len(gone) > 0 {
			t.Fatalf("an uninstall of a forged revision deleted or replaced %v", gone)
		}
	})

	t.Run("records that would crash or exhaust the operator fail their own stack only", func(t *testing.T) {
		e.t = t
		pad := strings.Repeat("x", 1000)
		var aliases, unknown strings.Builder
		fmt.Fprintf(&aliases, "\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: expands\ndata:\n  pad: &p %q\n  more:\n", pad)
		for range 900 {
			aliases.WriteString("  - *p\n")
		}
		for i := range 5000 {
			fmt.Fprintf(&unknown, "\n---\napiVersion: g%d.example.com/v1\nkind: Thing\nmetadata: {name: t%d}\n", i, i)
		}
		for _, tc := range []struct{ stack, objects, says string }{
			// The strategic merge patch panics on a null list element,
			// in Helm's own goroutine.
			{"null-container", "\n---\napiVersion: apps/v1\nkind: Deployment\nmetadata:\n  name: null-container-inference-stack-gateway\nspec:\n  template:\n    spec:\n      containers: [null]\n", "null in a list"},
			// Aliases expand in every parser the manifest meets.
			{"aliased", aliases.String(), "anchor or alias"},
			// Each unknown group is a discovery request under the
			// manager's REST mapper lock.
			{"unknown-groups", unknown.String(), "not a kind the chart renders"},
		} {
			e.apply(tc.stack, "v0", `{applications: {a: {}}}`)
			e.waitDeployed(tc.stack)
			forge(tc.stack, tc.objects)
			replicas(e, tc.stack, 2)
		}
		e.apply("bystander", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("bystander")
		for _, tc := range []struct{ stack, says string }{
			{"null-container", "null in a list"}, {"aliased", "anchor or alias"}, {"unknown-groups", "not a kind the chart renders"},
		} {
			failsSaying(tc.stack, "refusing to act on release "+tc.stack, tc.says)
		}
	})

	t.Run("many Secrets labelled as a release's records are read a few at a time and refused past the bound", func(t *testing.T) {
		e.t = t
		e.apply("crowded", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("crowded")
		// 24 Secrets of about 1 MiB each (not records: they decode to
		// nothing), 24 MiB that Helm would list in one response.
		junk := []byte(strings.Repeat("A", 1<<20-1024))
		for i := range 24 {
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("sh.helm.release.v1.crowded.v%d", 100+i), Namespace: ns,
					Labels: map[string]string{"owner": "helm", "name": "crowded", "status": "superseded", "version": fmt.Sprint(100 + i)}},
				Type: "helm.sh/release.v1",
				Data: map[string][]byte{"release": junk},
			}
			if _, err := cs.CoreV1().Secrets(ns).Create(ctx, s, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		from := e.requests.since()
		replicas(e, "crowded", 2)
		failsSaying("crowded", "the release's records hold more than")
		for i, q := range e.requests.queriesSince(from) {
			if q.Get("labelSelector") != "" && strings.Contains(q.Get("labelSelector"), "name=crowded") && q.Get("limit") == "" {
				t.Errorf("request %d listed the release's records without a limit: %v", i, q)
			}
		}
	})

	t.Run("a gzip bomb in a release record costs the operator nothing but that stack's release", func(t *testing.T) {
		e.t = t
		e.apply("bombed", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("bombed")
		// 256 MiB of zeros, a quarter MiB stored: Helm's own driver
		// inflates it whole on every read of the release's history.
		var buf bytes.Buffer
		w, err := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		if err != nil {
			t.Fatal(err)
		}
		zeros := make([]byte, 1<<20)
		for range 256 {
			if _, err := w.Write(zeros); err != nil {
				t.Fatal(err)
			}
		}
		if err := w.Close(); err != nil {
			t.Fatal(err)
		}
		bomb := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.bombed.v9", Namespace: ns,
				Labels: map[string]string{"owner": "helm", "name": "bombed", "status": "deployed", "version": "9"}},
			Type: "helm.sh/release.v1",
			Data: map[string][]byte{"release": []byte(base64.StdEncoding.EncodeToString(buf.Bytes()))},
		}
		if err := keys.Sign(ctx, bomb); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, bomb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		replicas(e, "bombed", 2)
		failsSaying("bombed", "sh.helm.release.v1.bombed.v9", "inflates to more than")
		// Another tenant's stack still installs.
		e.apply("unaffected", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("unaffected")
		// Deleting the bomb, then changing the spec (which ends a
		// backoff), lets the stack roll forward.
		if err := cs.CoreV1().Secrets(ns).Delete(ctx, bomb.Name, metav1.DeleteOptions{PropagationPolicy: ptr.To(metav1.DeletePropagationBackground)}); err != nil {
			t.Fatal(err)
		}
		replicas(e, "bombed", 3)
		e.eventually("bombed upgraded once the bomb is gone", 90*time.Second, func(ctx context.Context) (bool, string) {
			u := e.getStack("bombed")
			observed, _, _ := unstructured.NestedInt64(u.Object, "status", "observedGeneration")
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			return observed == u.GetGeneration(), fmt.Sprintf("observed %d of %d; %v", observed, u.GetGeneration(), conds)
		})
	})

	// What a tenant writes with Helm's own library carries no signature;
	// a signed record copied under another revision's name does not
	// verify. Either is refused before it is decoded.
	unsigned := driver.NewSecrets(cs.CoreV1().Secrets(ns))
	t.Run("a revision no operator signed is refused, and one older than the stack's is left out", func(t *testing.T) {
		e.t = t
		e.apply("unsigned", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("unsigned")
		rels, err := secrets.Query(map[string]string{"name": "unsigned", "owner": "helm"})
		if err != nil || len(rels) != 1 {
			t.Fatalf("the stack's revisions: %v, %v", rels, err)
		}
		own := rels[0]
		older, newer := *own, *own
		older.Version, newer.Version = 0, own.Version+1
		newer.Manifest = own.Manifest + ownNamespace
		for _, r := range []*release.Release{&older, &newer} {
			if err := unsigned.Create(fmt.Sprintf("sh.helm.release.v1.unsigned.v%d", r.Version), r); err != nil {
				t.Fatal(err)
			}
		}
		replicas(e, "unsigned", 2)
		failsSaying("unsigned", fmt.Sprintf("refusing release record sh.helm.release.v1.unsigned.v%d: it is not signed by an operator", newer.Version))
		if gone := survivors(ctx); len(gone) > 0 {
			t.Fatalf("a refused revision deleted or replaced %v", gone)
		}
		if err := cs.CoreV1().Secrets(ns).Delete(ctx, fmt.Sprintf("sh.helm.release.v1.unsigned.v%d", newer.Version), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		replicas(e, "unsigned", 3)
		e.waitDeployedAtGeneration("unsigned")
		if _, err := cs.CoreV1().Secrets(ns).Get(ctx, "sh.helm.release.v1.unsigned.v0", metav1.GetOptions{}); err != nil {
			t.Errorf("the older revision no operator signed: %v (left out, it is neither acted on nor deleted)", err)
		}
	})

	t.Run("Secrets signed by majors nobody lists, by the hundred, cost a bounded read", func(t *testing.T) {
		e.t = t
		e.apply("junk", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("junk")
		// Empty Secrets weigh nothing but a few hundred bytes each; each
		// names a major the CRD does not list, whose key an operator would
		// look for.
		for i := range 300 {
			s := &corev1.Secret{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("junk-%d", i), Namespace: ns,
					Labels:      map[string]string{"owner": "helm", "name": "junk", "status": "superseded", "version": "0"},
					Annotations: map[string]string{helmrecord.SignatureAnnotation: fmt.Sprintf("v%d.000000000000.AAAA", 10+i%90)}},
			}
			if err := e.cl.Create(ctx, s); err != nil {
				t.Fatal(err)
			}
		}
		from := e.requests.since()
		replicas(e, "junk", 2)
		failsSaying("junk", "or are more than 256")
		if keyReads := countRequests(e.requests, from, "GET /api/v1/namespaces/"+inferencestack.Namespace("v")); keyReads > 0 {
			t.Errorf("%d reads of release-record keys for 300 Secrets naming majors the CRD does not list", keyReads)
		}
		// Each read of the history is one list and at most 64 more pages:
		// 256 Secrets fit the bound, the 257th (on page 65) ends the read.
		reads, pages := 0, 0
		for _, q := range e.requests.queriesSince(from) {
			if strings.Contains(q.Get("labelSelector"), "name=junk") {
				pages++
				if q.Get("continue") == "" {
					reads++
				}
			}
		}
		if reads == 0 || pages > 65*reads {
			t.Errorf("%d requests for %d reads of the release's records: a read is bounded to 65", pages, reads)
		}
	})

	t.Run("a signed revision copied under another revision's name does not verify", func(t *testing.T) {
		e.t = t
		e.apply("copied", "v0", `{applications: {a: {}}}`)
		e.waitDeployed("copied")
		orig, err := cs.CoreV1().Secrets(ns).Get(ctx, "sh.helm.release.v1.copied.v1", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if orig.Annotations[helmrecord.SignatureAnnotation] == "" {
			t.Fatalf("the operator's record carries no signature: %v", orig.Annotations)
		}
		cp := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "sh.helm.release.v1.copied.v2", Namespace: ns,
			Labels: maps.Clone(orig.Labels), Annotations: orig.Annotations}, Type: orig.Type, Data: orig.Data}
		cp.Labels["version"] = "2"
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, cp, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		replicas(e, "copied", 2)
		failsSaying("copied", "refusing release record sh.helm.release.v1.copied.v2: it carries a signature that does not verify")
	})
}

// countRequests counts the requests from the from-th on whose method and
// path start with prefix.
func countRequests(l *requestLog, from int, prefix string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, r := range l.requests[from:] {
		if strings.HasPrefix(r, prefix) {
			n++
		}
	}
	return n
}

// testKeys reads the release-record keys as the v0 operator does, where it
// runs by default.
func testKeys(cs kubernetes.Interface) *helmrecord.Keys {
	return &helmrecord.Keys{Own: "v0",
		Namespace: func(context.Context, string) (string, error) { return inferencestack.Namespace("v0"), nil },
		Majors:    func(context.Context) ([]string, error) { return nil, nil },
		Secrets:   func(ns string) corev1client.SecretInterface { return cs.CoreV1().Secrets(ns) }}
}

// replicas sets application a's replica count, a new generation of the
// stack.
func replicas(e *env, stack string, n int64) {
	e.t.Helper()
	before := e.getStack(stack).GetGeneration()
	e.update(stack, func(u *unstructured.Unstructured) {
		_ = unstructured.SetNestedField(u.Object, n, "spec", "applications", "a", "replicaCount")
	})
	if after := e.getStack(stack).GetGeneration(); after <= before {
		e.t.Fatalf("setting %s's replicaCount left its generation at %d", stack, after)
	}
}

// A spec the API server admits but whose render is too large is refused
// with a condition naming the limit, before anything is created, and the
// operator goes on reconciling other stacks.
func TestOversizeSpecIsRefused(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	// spec is applications app-0..app-<apps-1> over a template of four
	// environment variables of 15,000 characters (60 KB, within the CRD's
	// 64 Ki per list), and with more, four pod annotations and a reader
	// setting as large.
	spec := func(apps int, more bool) string {
		pad := strings.Repeat("x", 15000)
		var env []any
		annotations := map[string]any{}
		for i := range 4 {
			env = append(env, map[string]any{"name": fmt.Sprintf("PADDING_%d", i), "value": pad})
			annotations[fmt.Sprintf("example.com/padding-%d", i)] = pad
		}
		template := map[string]any{"env": env}
		if more {
			template["podAnnotations"] = annotations
			template["readerConfig"] = map[string]any{"padding": pad + pad}
		}
		applications := map[string]any{}
		for i := range apps {
			applications[fmt.Sprintf("app-%d", i)] = map[string]any{}
		}
		b, err := json.Marshal(map[string]any{"applicationTemplate": template, "applications": applications})
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	for _, tc := range []struct{ stack, spec, says string }{
		// About 1.5 MB of values, rendered into 24 Deployments: refused
		// once rendered.
		{"renders-too-much", spec(24, false), "renders a manifest of"},
		// About 4.6 MB of values: refused before it is rendered.
		{"too-many-copies", spec(32, true), "has values (each application merged over the template) of"},
	} {
		t.Run(tc.stack, func(t *testing.T) {
			e.t = t
			e.apply(tc.stack, "v0", tc.spec)
			e.eventually(tc.stack+" refused", 60*time.Second, func(ctx context.Context) (bool, string) {
				s, r, m := condition(e.getStack(tc.stack), "ReleaseFailed")
				return s == "True" && strings.Contains(m, tc.says) && strings.Contains(m, "above the operator's limit of"), fmt.Sprintf("ReleaseFailed=%s %s: %s", s, r, m)
			})
			e.eventually("a RenderTooLarge event", 30*time.Second, func(ctx context.Context) (bool, string) {
				ev, ok := hasEvent(e.events(tc.stack), "RenderTooLarge")
				return ok, ev.Message
			})
			ctx := t.Context()
			var deployments appsv1.DeploymentList
			if err := e.cl.List(ctx, &deployments, client.InNamespace(ns), client.MatchingLabels{"app.kubernetes.io/instance": tc.stack}); err != nil {
				t.Fatal(err)
			}
			var secrets corev1.SecretList
			if err := e.cl.List(ctx, &secrets, client.InNamespace(ns), client.MatchingLabels{"owner": "helm", "name": tc.stack}); err != nil {
				t.Fatal(err)
			}
			if len(deployments.Items) > 0 || len(secrets.Items) > 0 {
				t.Errorf("a refused stack created %d Deployments and %d release records", len(deployments.Items), len(secrets.Items))
			}
		})
	}
	e.t = t
	e.apply("small", "v0", `{applications: {a: {}}}`)
	e.waitDeployed("small")
}

// The operator reads a namespace's Pod Security level from its labels
// (the platform's, kept whole in the cache): in a restricted namespace a
// stack that baseline allows and restricted refuses is refused.
func TestNamespaceLevelIsRead(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	ctx := t.Context()
	const restricted = "restricted-tenant"
	if err := e.cl.Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: restricted,
		Labels: map[string]string{"pod-security.kubernetes.io/enforce": "restricted"}}}); err != nil {
		t.Fatal(err)
	}
	var spec string
	for _, c := range podsecuritytest.Cases {
		if c.Restricted && !c.Baseline {
			s, err := c.YAML()
			if err != nil {
				t.Fatal(err)
			}
			spec = s
			break
		}
	}
	if spec == "" {
		t.Fatal("no case that only restricted refuses")
	}
	var values map[string]any
	if err := yaml.Unmarshal([]byte(spec), &values); err != nil {
		t.Fatal(err)
	}
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "models.takeoff.co/v1alpha1", "kind": "InferenceStack",
		"metadata": map[string]any{"name": "strict", "namespace": restricted, "labels": map[string]any{"operatorVersion": "v0"}},
		"spec":     values,
	}}
	if err := e.cl.Create(ctx, u); err != nil {
		t.Fatal(err)
	}
	e.eventually("refused at the namespace's level", 60*time.Second, func(ctx context.Context) (bool, string) {
		got := &unstructured.Unstructured{}
		got.SetGroupVersionKind(u.GroupVersionKind())
		if err := e.cl.Get(ctx, client.ObjectKeyFromObject(u), got); err != nil {
			return false, err.Error()
		}
		s, r, m := condition(got, "ReleaseFailed")
		return s == "True" && strings.Contains(m, "restricted"), fmt.Sprintf("ReleaseFailed=%s %s: %s", s, r, m)
	})
}
