package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/santhosh-tekuri/jsonschema/v6"
	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/kube"
	"helm.sh/helm/v3/pkg/release"
	"helm.sh/helm/v3/pkg/storage/driver"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/metrics"
)

// What a Helm action costs the API server and the CPU, trimmed without
// changing what it does. Each action client serves one reconcile of one
// stack, so whatever is remembered here lives for one reconcile.

// lean returns the chart the operator installs: chrt without what every
// release revision would store for nothing (the README) and without its
// values schema, which Helm would compile again for every render; the
// schema is compiled once into the returned validator instead.
func lean(chrt *chart.Chart) (*chart.Chart, *valuesSchema, error) {
	c := *chrt
	c.Files = nil
	for _, f := range chrt.Files {
		if !strings.EqualFold(f.Name, "README.md") {
			c.Files = append(c.Files, f)
		}
	}
	c.Schema = nil
	if len(chrt.Schema) == 0 {
		return &c, nil, nil
	}
	doc, err := jsonschema.UnmarshalJSON(bytes.NewReader(chrt.Schema))
	if err != nil {
		return nil, nil, fmt.Errorf("reading the values schema of chart %s: %w", chrt.Name(), err)
	}
	compiler := jsonschema.NewCompiler()
	const url = "file:///values.schema.json"
	if err := compiler.AddResource(url, doc); err != nil {
		return nil, nil, fmt.Errorf("loading the values schema of chart %s: %w", chrt.Name(), err)
	}
	schema, err := compiler.Compile(url)
	if err != nil {
		return nil, nil, fmt.Errorf("compiling the values schema of chart %s: %w", chrt.Name(), err)
	}
	return &c, &valuesSchema{chart: chrt.Name(), schema: schema}, nil
}

// valuesSchema validates a release's values as Helm would with the chart's
// values.schema.json, with the schema compiled once. That schema is
// generated from the API types (operator/api/v1alpha1): this is no rule
// of its own.
type valuesSchema struct {
	chart  string
	schema *jsonschema.Schema
}

func (v *valuesSchema) validate(vals map[string]any) error {
	if v == nil {
		return nil
	}
	if err := v.schema.Validate(vals); err != nil {
		msg := strings.TrimPrefix(err.Error(), "jsonschema validation failed with 'file:///values.schema.json#'\n")
		return fmt.Errorf("values don't meet the specifications of the schema(s) in the following chart(s):\n%s:\n%s", v.chart, msg)
	}
	return nil
}

// cachedKubeClient is Helm's Kubernetes client, held to the stack's scope
// (see stackscope.go) and cheaper in two ways:
//   - without the /version request Helm makes before every Get, Install and
//     Upgrade to check the cluster is reachable: the action client was
//     created from the cluster's capabilities moments ago, and a request
//     that fails reports it anyway;
//   - an install's read of each object before it creates it (to check
//     that none exists) is answered NotFound without a request when the
//     operator's cache of Helm-managed objects' metadata says the object
//     is absent (see objectTransport). For a new stack those were seven
//     reads that all returned NotFound. No other action's reads are: the
//     cache holds only objects labelled as Helm's, so an object whose
//     label was removed, or one the cache has not seen yet, would look
//     absent, and an upgrade would try to create it (failing the release
//     for good) or skip deleting it (leaving its pods running).
//
// It also records in seen each object as the API server returns it, for
// the stack's verified digest (settled.go).
type cachedKubeClient struct {
	*kube.Client
	scope *stackScope
	// objects is the cache of Helm-managed objects' metadata; nil: every
	// read goes to the API server.
	objects client.Reader
	// cached tells the kinds objects holds every Helm-managed object of.
	cached func(schema.GroupVersionKind) bool
	// installing is set while the action client runs an install: only
	// an install's reads may be answered from the cache (see
	// objectTransport).
	installing *atomic.Bool
	seen       *seenObjects
	// written records the generations the API server gives Deployments
	// in its answers (see writtenGenerations).
	written *writtenGenerations
}

func (cachedKubeClient) IsReachable() error { return nil }

// Helm runs an upgrade's writes in a goroutine of its own, out of reach of
// controller-runtime's recovery: a panic in what they call (the strategic
// merge patch, given an object no API server would return) would end the
// process, every tenant's reconciles with it. Each write is its stack's
// failure instead.

func (c cachedKubeClient) Create(resources kube.ResourceList) (res *kube.Result, err error) {
	defer recovered(&err, "creating the release's objects")
	return c.Client.Create(resources)
}

func (c cachedKubeClient) Update(original, target kube.ResourceList, force bool) (res *kube.Result, err error) {
	defer recovered(&err, "updating the release's objects")
	return c.Client.Update(original, target, force)
}

func (c cachedKubeClient) UpdateThreeWayMerge(original, target kube.ResourceList, force bool) (res *kube.Result, err error) {
	defer recovered(&err, "updating the release's objects")
	return c.Client.UpdateThreeWayMerge(original, target, force)
}

func (c cachedKubeClient) Delete(resources kube.ResourceList) (*kube.Result, []error) {
	return recoveredDelete(func() (*kube.Result, []error) { return c.Client.Delete(resources) })
}

func (c cachedKubeClient) DeleteWithPropagationPolicy(resources kube.ResourceList, policy metav1.DeletionPropagation) (*kube.Result, []error) {
	return recoveredDelete(func() (*kube.Result, []error) { return c.Client.DeleteWithPropagationPolicy(resources, policy) })
}

// recoveredDelete runs a delete of Helm's, a panic in it its error.
func recoveredDelete(del func() (*kube.Result, []error)) (res *kube.Result, errs []error) {
	var err error
	defer func() {
		if err != nil {
			res, errs = nil, []error{err}
		}
	}()
	defer recovered(&err, "deleting the release's objects")
	return del()
}

// recovered turns a panic into *err.
func recovered(err *error, what string) {
	if r := recover(); r != nil {
		*err = fmt.Errorf("%s: the Kubernetes client failed on what it was given (%v): refusing to go on", what, r)
	}
}

// Build is Helm's, without the objects outside the stack's scope, and with
// each object's REST client sending only what the scope allows (and
// answering a read from the cache when the cache proves the object
// absent).
func (c cachedKubeClient) Build(reader io.Reader, validate bool) (kube.ResourceList, error) {
	list, err := c.Client.Build(reader, validate)
	if err != nil {
		return list, err
	}
	// Helm's factory is kubectl's, which gives its configuration.
	getter, ok := c.Factory.(interface{ ToRESTConfig() (*rest.Config, error) })
	if !ok {
		return nil, fmt.Errorf("helm's client factory %T gives no configuration to hold its requests to the stack with", c.Factory)
	}
	cfg, err := getter.ToRESTConfig()
	if err != nil {
		return nil, fmt.Errorf("reading Helm's client configuration: %w", err)
	}
	kept := make(kube.ResourceList, 0, len(list))
	for _, info := range list {
		if err := c.scope.admit(info); err != nil {
			c.scope.refuse(fmt.Errorf("left alone %w", err))
			continue
		}
		rc, ok := info.Client.(*rest.RESTClient)
		if !ok {
			return nil, fmt.Errorf("helm's client of %s %s is a %T, which the operator cannot hold to the stack", info.Mapping.GroupVersionKind.Kind, info.Name, info.Client)
		}
		var objects client.Reader
		if c.objects != nil && c.installing != nil && c.installing.Load() && c.cached(info.Mapping.GroupVersionKind) {
			objects = c.objects
		}
		if info.Client, err = scopedClient(cfg, rc, info, c.scope, objects, c.seen, c.written); err != nil {
			return nil, err
		}
		kept = append(kept, info)
	}
	return kept, nil
}

// scopedClient returns a client like rc (the one Helm's builder made for
// info) whose requests go through an objectTransport.
func scopedClient(cfg *rest.Config, rc *rest.RESTClient, info *resource.Info, scope *stackScope, objects client.Reader, seen *seenObjects, written *writtenGenerations) (*rest.RESTClient, error) {
	gvk := info.Mapping.GroupVersionKind
	collection := rc.Get().NamespaceIfScoped(info.Namespace, info.Namespaced()).Resource(info.Mapping.Resource.Resource)
	t := &objectTransport{scope: scope, objects: objects, gvk: gvk, resource: info.Mapping.Resource.GroupResource(),
		key:        client.ObjectKey{Namespace: info.Namespace, Name: info.Name},
		collection: collection.URL().Path,
		path:       collection.Name(info.Name).URL().Path,
		seen:       seen,
		written:    written}
	// As cli-runtime's builder makes an object's client, sharing its rate
	// limiter; cfg carries the manager's transport (helmRESTConfig), so
	// the connections are the manager's.
	cfg = rest.CopyConfig(cfg)
	cfg.ContentConfig = resource.UnstructuredPlusDefaultContentConfig()
	gv := gvk.GroupVersion()
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.RateLimiter = rc.GetRateLimiter()
	cfg.Wrap(func(next http.RoundTripper) http.RoundTripper {
		t.next = next
		return t
	})
	c, err := rest.RESTClientFor(cfg)
	if err != nil {
		return nil, fmt.Errorf("creating the client of %s %s: %w", gvk.Kind, info.Name, err)
	}
	return c, nil
}

// cacheAnsweredReads counts the reads answered from the cache. client-go
// counts each of them in rest_client_requests_total too (a GET answered
// 404), since it counts before the transport: the requests the API server
// received are that total less this one.
var cacheAnsweredReads = prometheus.NewCounter(prometheus.CounterOpts{
	Name: "inference_stack_cache_answered_reads_total",
	Help: "Helm reads of a release's objects answered NotFound from the operator's cache without a request; rest_client_requests_total counts them too.",
})

func init() {
	metrics.Registry.MustRegister(cacheAnsweredReads)
}

// cacheSyncWait bounds the wait for a kind's informer to sync before a read
// goes to the API server instead.
const cacheSyncWait = 10 * time.Second

// objectTransport is the transport of one object's REST client (see
// scopedClient): it sends only the requests the stack's scope allows for
// the object, answers a read NotFound from the cache when the cache holds
// no metadata of it, and records what the API server returns of it.
//
// Only an install's reads are answered so, when the release has no object
// yet. The cache holds the objects labelled
// app.kubernetes.io/managed-by=Helm, which Helm puts on every object it
// creates or adopts. An object the cache misses (one without that label,
// or one created in the instant before the read) is never overwritten:
// Helm then creates it, and the API server refuses the create as
// AlreadyExists, which fails the install; its retry is an upgrade, which
// reads every object from the API server and adopts what Helm would
// adopt.
type objectTransport struct {
	next  http.RoundTripper
	scope *stackScope
	// objects answers reads when it holds no metadata of the object; nil
	// when it cannot tell.
	objects client.Reader
	// path is the object's, collection its kind's in its namespace.
	path, collection string
	gvk              schema.GroupVersionKind
	key              client.ObjectKey
	resource         schema.GroupResource
	seen             *seenObjects
	written          *writtenGenerations

	mu sync.Mutex
	// live is the object as the API server last returned it to this
	// client, nil if it has not (or said it does not exist).
	live *metav1.PartialObjectMetadata
}

func (t *objectTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	switch {
	case req.Method == http.MethodGet && req.URL.Path == t.path:
		if t.objects != nil && t.absentInCache(req.Context()) {
			cacheAnsweredReads.Inc()
			return t.notFound(req), nil
		}
		return t.send(req)
	case req.Method == http.MethodPost && req.URL.Path == t.collection:
		b, req, err := readBody(req)
		if err != nil {
			return nil, err
		}
		obj := &metav1.PartialObjectMetadata{}
		if err := json.Unmarshal(b, obj); err != nil {
			return nil, fmt.Errorf("reading the %s Helm creates: %w", t.gvk.Kind, err)
		}
		if err := t.scope.mayCreate(obj, t.key.Name); err != nil {
			return nil, err
		}
		return t.send(req)
	case (req.Method == http.MethodPatch || req.Method == http.MethodPut) && req.URL.Path == t.path:
		live, err := t.current(req, false)
		if err != nil {
			return nil, err
		}
		if live != nil {
			if err := t.scope.mayChange(live); err != nil {
				return nil, err
			}
		}
		return t.send(req)
	case req.Method == http.MethodDelete && req.URL.Path == t.path:
		// Read now, not earlier in the operation: what is deleted must be
		// what was checked, which the UID precondition then holds to.
		live, err := t.current(req, true)
		if err != nil {
			return nil, err
		}
		if live == nil {
			return t.notFound(req), nil
		}
		if err := t.scope.mayDelete(live); err != nil {
			t.scope.refuse(err)
			return t.notFound(req), nil
		}
		if req, err = withUIDPrecondition(req, live.UID); err != nil {
			return nil, err
		}
		return t.send(req)
	}
	return nil, fmt.Errorf("refusing %s %s: not a request Helm makes for %s %s", req.Method, req.URL.Path, t.gvk.Kind, t.key)
}

// absentInCache tells whether the cache holds no metadata of the object.
func (t *objectTransport) absentInCache(ctx context.Context) bool {
	m := &metav1.PartialObjectMetadata{}
	m.SetGroupVersionKind(t.gvk)
	// The first read of a kind starts its informer and waits for it to
	// sync; one that cannot sync (no permission to list the kind) must not
	// hold Helm, whose reads carry no deadline.
	ctx, cancel := context.WithTimeout(ctx, cacheSyncWait)
	defer cancel()
	return apierrors.IsNotFound(t.objects.Get(ctx, t.key, m))
}

// current is the object as the API server last returned it to this
// client, or as it is now if fresh or if it has returned nothing yet; nil
// if it does not exist.
func (t *objectTransport) current(req *http.Request, fresh bool) (*metav1.PartialObjectMetadata, error) {
	t.mu.Lock()
	live := t.live
	t.mu.Unlock()
	if live != nil && !fresh {
		return live, nil
	}
	u := *req.URL
	u.RawQuery = ""
	live, err := getLive(req.Context(), t.next, u.String())
	if err != nil {
		return nil, fmt.Errorf("reading %s %s before changing it: %w", t.gvk.Kind, t.key, err)
	}
	t.remember(live)
	return live, nil
}

func (t *objectTransport) remember(live *metav1.PartialObjectMetadata) {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.live = live
}

// notFound is the API server's answer for an object that does not exist.
func (t *objectTransport) notFound(req *http.Request) *http.Response {
	status := apierrors.NewNotFound(t.resource, t.key.Name).ErrStatus
	status.APIVersion, status.Kind = "v1", "Status"
	body, _ := json.Marshal(status) // a Status always marshals
	return &http.Response{
		Status:        "404 Not Found",
		StatusCode:    http.StatusNotFound,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": []string{"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}
}

// send sends req to the API server and records the object it returns.
func (t *objectTransport) send(req *http.Request) (*http.Response, error) {
	resp, err := t.next.RoundTrip(req)
	if err != nil {
		return resp, err
	}
	ref := objectRef{gvk: t.gvk, namespace: t.key.Namespace, name: t.key.Name}
	switch {
	case resp.StatusCode == http.StatusNotFound && req.Method == http.MethodGet:
		t.remember(nil)
		return resp, nil
	case resp.StatusCode/100 != 2:
		return resp, nil
	case req.Method == http.MethodDelete:
		t.remember(nil)
		t.seen.forget(ref)
		t.written.forget(types.NamespacedName(t.key))
		return resp, nil
	}
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading the response to %s %s: %w", req.Method, req.URL.Path, err)
	}
	resp.Body = io.NopCloser(bytes.NewReader(body))
	m := &metav1.PartialObjectMetadata{}
	if json.Unmarshal(body, m) == nil && m.Name == t.key.Name {
		t.remember(m)
		t.seen.record(ref, objectVersion(m))
		if t.gvk.Group == "apps" && t.gvk.Kind == "Deployment" {
			t.written.note(types.NamespacedName(t.key), m.UID, m.Generation)
		}
	} else {
		t.remember(nil)
		t.seen.forget(ref)
	}
	return resp, nil
}

// leanRecords stores each release revision without its chart's templates.
// Helm keeps every revision (up to --max-release-history) as a Secret, and
// the templates were four fifths of it (14.9 KB compressed, 2.6 without):
// for 2,000 stacks, 200 MB of etcd instead of 35, and every install and
// upgrade sent and compressed them twice (the pending record and its
// update). Nothing reads them back: an upgrade renders the chart the
// operator embeds, an uninstall and a rollback act on the stored manifest,
// and `helm get` and `helm history` read the manifest, values and chart
// metadata, which a record keeps.
type leanRecords struct {
	driver.Driver
}

func (l leanRecords) Create(key string, rls *release.Release) error {
	return l.Driver.Create(key, withoutTemplates(rls))
}

func (l leanRecords) Update(key string, rls *release.Release) error {
	return l.Driver.Update(key, withoutTemplates(rls))
}

// withoutTemplates is rls with a chart that has no templates; rls itself,
// which Helm goes on using, is unchanged.
func withoutTemplates(rls *release.Release) *release.Release {
	if rls == nil || rls.Chart == nil || len(rls.Chart.Templates) == 0 {
		return rls
	}
	r, c := *rls, *rls.Chart
	c.Templates = nil
	r.Chart = &c
	return &r
}

// releaseNames tells, without a request, that a release has no revision
// at all: the cache holds the metadata of every Helm release Secret in the
// watched namespaces (CacheOptions), so a name it has never seen is a new
// release, and Helm's list of its history (one request per new stack)
// would come back empty. A name this process wrote a revision of is not
// taken as new, even when the cache has not seen the write yet, until it
// deletes a revision of it (see historyOnce.Delete). What is
// left is a revision another writer creates in the moment between the
// cache's answer and the install's: then the install's create of revision
// 1 fails as already existing, and the retry lists the history.
type releaseNames struct {
	cache client.Reader
	mu    sync.Mutex
	wrote map[client.ObjectKey]bool
}

func newReleaseNames(cache client.Reader) *releaseNames {
	return &releaseNames{cache: cache, wrote: map[client.ObjectKey]bool{}}
}

// written records that this process is writing a revision of the release.
func (r *releaseNames) written(namespace, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.wrote[client.ObjectKey{Namespace: namespace, Name: name}] = true
}

// deleted records that this process is deleting a revision of the release.
func (r *releaseNames) deleted(namespace, name string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	delete(r.wrote, client.ObjectKey{Namespace: namespace, Name: name})
}

// new says whether the release certainly has no revision.
func (r *releaseNames) new(ctx context.Context, namespace, name string) bool {
	r.mu.Lock()
	wrote := r.wrote[client.ObjectKey{Namespace: namespace, Name: name}]
	r.mu.Unlock()
	if wrote {
		return false
	}
	secrets, err := releaseSecretsOf(ctx, r.cache, namespace, name)
	return err == nil && len(secrets.Items) == 0
}

// historyOnce remembers, within one reconcile, the release history queries
// Helm repeats (the library's two Gets and Helm's own checks each list the
// release's Secrets); any write forgets them. A query of a release that
// names says is new is answered, empty, without a request.
type historyOnce struct {
	driver.Driver
	names           *releaseNames
	name, namespace string
	mu              sync.Mutex
	queries         map[string][]*release.Release
	errs            map[string]error
}

func newHistoryOnce(d driver.Driver, names *releaseNames, name, namespace string) *historyOnce {
	return &historyOnce{Driver: d, names: names, name: name, namespace: namespace,
		queries: map[string][]*release.Release{}, errs: map[string]error{}}
}

// unknown says whether a query of these labels can only find revisions of
// a release names says is new: Helm's queries of a release's history and
// of its deployed revision, which name it.
func (h *historyOnce) unknown(labels map[string]string) bool {
	return h.names != nil && labels["owner"] == "helm" && labels["name"] == h.name &&
		h.names.new(context.Background(), h.namespace, h.name)
}

func (h *historyOnce) Query(labels map[string]string) ([]*release.Release, error) {
	keys := make([]string, 0, len(labels))
	for k, v := range labels {
		keys = append(keys, k+"="+v)
	}
	sort.Strings(keys)
	key := strings.Join(keys, ",")
	h.mu.Lock()
	defer h.mu.Unlock()
	if rels, ok := h.queries[key]; ok {
		return copies(rels), h.errs[key]
	}
	var rels []*release.Release
	var err error
	if h.unknown(labels) {
		err = driver.ErrReleaseNotFound // what the Secrets driver says of an empty list
	} else {
		rels, err = h.Driver.Query(labels)
	}
	if err != nil && !errors.Is(err, driver.ErrReleaseNotFound) {
		return nil, err
	}
	h.queries[key], h.errs[key] = rels, err
	return copies(rels), err
}

// copies lets callers change a release's Info (as Helm does before it
// writes) without changing what is remembered.
func copies(rels []*release.Release) []*release.Release {
	out := make([]*release.Release, len(rels))
	for i, r := range rels {
		c := *r
		if r.Info != nil {
			info := *r.Info
			c.Info = &info
		}
		out[i] = &c
	}
	return out
}

func (h *historyOnce) forget() {
	h.mu.Lock()
	defer h.mu.Unlock()
	clear(h.queries)
	clear(h.errs)
}

func (h *historyOnce) Create(key string, rls *release.Release) error {
	h.forget()
	h.wrote(rls)
	return h.Driver.Create(key, rls)
}

func (h *historyOnce) Update(key string, rls *release.Release) error {
	h.forget()
	h.wrote(rls)
	return h.Driver.Update(key, rls)
}

func (h *historyOnce) wrote(rls *release.Release) {
	if h.names != nil && rls != nil {
		h.names.written(h.namespace, rls.Name)
	}
}

func (h *historyOnce) Delete(key string) (*release.Release, error) {
	h.forget()
	if h.names != nil {
		// Helm deletes a revision when it prunes the history (before it
		// creates the next, which records the name again) or uninstalls:
		// what is left was written earlier and is in the cache, so the
		// name need not be remembered (a stack re-created under it is new
		// once the cache says so), and the memory of names stays bounded
		// by the releases that exist.
		h.names.deleted(h.namespace, h.name)
	}
	return h.Driver.Delete(key)
}
