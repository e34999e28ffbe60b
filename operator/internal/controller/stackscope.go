package controller

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/cli-runtime/pkg/resource"
)

// What Helm may touch for a stack. Helm acts with the operator's
// cluster-wide power on what a release record says, and the records live
// in the stack's namespace, where whoever may edit the namespace may write
// Secrets: a forged record could name objects anywhere. So the operator
// does not trust a record's manifest, nor a re-parse of it that could read
// it otherwise than Helm does (YAML keys folded by case, a List whose items
// carry their own namespace): it checks what Helm has built from it, the
// resource.Info list, and every request Helm then sends for one of those
// objects (see stackScope and objectTransport):
//
//   - Helm builds only the chart's kinds in the stack's namespace; any
//     other object is dropped before Helm can act on it, and reported;
//   - a create must make the stack the object's controller (the
//     library's post-renderer puts that reference on every object it
//     renders, and stored manifests carry it);
//   - a change (patch, replace) is sent only for an object the stack
//     controls, or one without a controller that carries this release's
//     Helm ownership annotations (which only someone who may write the
//     object can have put there): what Helm would adopt;
//   - a delete only for an object the stack controls, and with the UID
//     checked as a precondition, so the object deleted is the one checked.
//     Any other delete is answered as if the object were gone: an
//     uninstall then completes, leaving it alone.
//
// What a release can then make the operator do is create, change and
// delete the chart's kinds in the stack's namespace, and only its own
// objects: what the namespace's editors may do there directly.

// stackScope is what one stack's Helm actions may act on.
type stackScope struct {
	namespace, release string
	uid                types.UID
	// refused reports an object or request the scope kept from Helm; nil
	// reports nothing.
	refused func(error)
}

// chartKind tells whether the inference-stack chart renders gk.
func chartKind(gk schema.GroupKind) bool {
	return slices.ContainsFunc(chartKinds, func(k schema.GroupVersionKind) bool { return k.GroupKind() == gk })
}

// admit tells whether Helm may act on the object info names at all: one
// of the chart's kinds, in the stack's namespace.
func (s *stackScope) admit(info *resource.Info) error {
	what := info.Name
	if info.Namespace != "" {
		what = info.Namespace + "/" + info.Name
	}
	if info.Mapping == nil {
		return fmt.Errorf("%s %s: no known kind", info.Object.GetObjectKind().GroupVersionKind().Kind, what)
	}
	gk := info.Mapping.GroupVersionKind.GroupKind()
	if !chartKind(gk) {
		return fmt.Errorf("%s %s: not a kind the chart renders", gk, what)
	}
	if !info.Namespaced() || info.Namespace != s.namespace {
		return fmt.Errorf("%s %s: not in the stack's namespace %s", gk, what, s.namespace)
	}
	return nil
}

func (s *stackScope) refuse(err error) {
	if s.refused != nil {
		s.refused(err)
	}
}

// controls tells whether the stack is m's controller.
func (s *stackScope) controls(m metav1.Object) bool {
	ref := metav1.GetControllerOfNoCopy(m)
	return ref != nil && ref.UID == s.uid
}

// mayChange tells whether Helm may patch or replace live, the object as it
// is now.
func (s *stackScope) mayChange(live *metav1.PartialObjectMetadata) error {
	if s.controls(live) {
		return nil
	}
	if ref := metav1.GetControllerOfNoCopy(live); ref != nil {
		return fmt.Errorf("refusing to change %s %s/%s: it is controlled by %s %s, not by the stack", live.Kind, live.Namespace, live.Name, ref.Kind, ref.Name)
	}
	a := live.GetAnnotations()
	if a["meta.helm.sh/release-name"] != s.release || a["meta.helm.sh/release-namespace"] != s.namespace {
		return fmt.Errorf("refusing to change %s %s/%s: neither the stack controls it nor does it belong to release %s/%s", live.Kind, live.Namespace, live.Name, s.namespace, s.release)
	}
	return nil
}

// mayDelete tells whether Helm may delete live.
func (s *stackScope) mayDelete(live *metav1.PartialObjectMetadata) error {
	if s.controls(live) {
		return nil
	}
	return fmt.Errorf("left %s %s/%s alone: a release record of the stack lists it, but the stack does not control it", live.Kind, live.Namespace, live.Name)
}

// mayCreate tells whether Helm may create obj, as sent: named as the object
// Helm built, in the stack's namespace, with the stack as its controller.
func (s *stackScope) mayCreate(obj *metav1.PartialObjectMetadata, name string) error {
	switch {
	case obj.Name != name:
		return fmt.Errorf("refusing to create %s %q through the client of %q", obj.Kind, obj.Name, name)
	case obj.Namespace != "" && obj.Namespace != s.namespace:
		return fmt.Errorf("refusing to create %s %s/%s outside the stack's namespace", obj.Kind, obj.Namespace, obj.Name)
	case !s.controls(obj):
		return fmt.Errorf("refusing to create %s %s/%s without the stack as its controller", obj.Kind, s.namespace, obj.Name)
	}
	return nil
}

// readBody returns req's body and a copy of req whose body can be read
// again (and resent by the transport below, through GetBody).
func readBody(req *http.Request) ([]byte, *http.Request, error) {
	if req.Body == nil || req.Body == http.NoBody {
		return nil, req, nil
	}
	b, err := io.ReadAll(req.Body)
	req.Body.Close()
	if err != nil {
		return nil, nil, fmt.Errorf("reading the body of %s %s: %w", req.Method, req.URL.Path, err)
	}
	return b, withBody(req, b), nil
}

// withBody is a copy of req sending b.
func withBody(req *http.Request, b []byte) *http.Request {
	out := req.Clone(req.Context())
	out.Body = io.NopCloser(bytes.NewReader(b))
	out.ContentLength = int64(len(b))
	out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(b)), nil }
	return out
}

// withUIDPrecondition is req, a delete, with the object's UID as a
// precondition added to its DeleteOptions: the API server deletes only the
// object that was checked, and answers a conflict if it was replaced.
func withUIDPrecondition(req *http.Request, uid types.UID) (*http.Request, error) {
	b, req, err := readBody(req)
	if err != nil {
		return nil, err
	}
	opts := map[string]any{}
	if len(bytes.TrimSpace(b)) > 0 {
		if err := json.Unmarshal(b, &opts); err != nil {
			return nil, fmt.Errorf("reading the options of DELETE %s: %w", req.URL.Path, err)
		}
	}
	if opts["kind"] == nil {
		opts["kind"], opts["apiVersion"] = "DeleteOptions", "v1"
	}
	pre, _ := opts["preconditions"].(map[string]any)
	if pre == nil {
		pre = map[string]any{}
	}
	pre["uid"] = string(uid)
	opts["preconditions"] = pre
	if b, err = json.Marshal(opts); err != nil {
		return nil, err
	}
	req = withBody(req, b)
	req.Header.Set("Content-Type", "application/json")
	return req, nil
}

// getLive reads the object at url through next, as it is now: nil if it
// does not exist.
func getLive(ctx context.Context, next http.RoundTripper, url string) (*metav1.PartialObjectMetadata, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/json")
	resp, err := next.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	switch {
	case resp.StatusCode == http.StatusNotFound:
		return nil, nil
	case resp.StatusCode/100 != 2:
		return nil, fmt.Errorf("reading %s: %s: %s", url, resp.Status, bytes.TrimSpace(body))
	}
	m := &metav1.PartialObjectMetadata{}
	if err := json.Unmarshal(body, m); err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	return m, nil
}
