// Package podsecurity checks what a stack's release would run against
// Pod Security, with the upstream k8s.io/pod-security-admission library:
// every pod template the chart rendered, at the level of the stack's
// namespace, read as Pod Security Admission reads it. The operator runs it
// on every render, before Helm writes anything, so a stack that would run
// a pod its author could not create directly is refused even where the
// catalog chart's admission policy is missing (an older API server, a
// deleted binding, a cluster without the policies).
//
// Besides the library's checks at the level, two hold for stacks at every
// level but privileged: the volume sources of level "restricted" (no host
// path, no volume the node mounts from the network), and the pods run as
// a ServiceAccount of the release itself.
package podsecurity

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/pod-security-admission/api"
	"k8s.io/pod-security-admission/policy"
	"sigs.k8s.io/yaml"
)

// Default is the level of a namespace without the enforce label: baseline,
// where Pod Security Admission would default to privileged. A stack's pods
// are created by the operator, so a namespace that says nothing gets the
// level that keeps pods from reaching the node.
var Default = api.LevelVersion{Level: api.LevelBaseline, Version: api.LatestVersion()}

// LevelOf is the level a namespace with these labels enforces: its
// pod-security.kubernetes.io/enforce (and -version) labels, Default where
// it has none. A label that does not parse is an error: the namespace's
// intent is unknown, so nothing is judged to comply.
func LevelOf(namespaceLabels map[string]string) (api.LevelVersion, error) {
	p, errs := api.PolicyToEvaluate(namespaceLabels, api.Policy{Enforce: Default, Audit: Default, Warn: Default})
	if len(errs) > 0 {
		return api.LevelVersion{}, fmt.Errorf("the namespace's Pod Security labels: %w", errs.ToAggregate())
	}
	return p.Enforce, nil
}

// Violation is one pod template that breaks the policy.
type Violation struct {
	// Object is "Kind/name" of the workload holding the pod template.
	Object string
	// Reasons are the library's reasons with their details ("privileged
	// (container "x" must not set securityContext.privileged=true)").
	Reasons []string
}

func (v Violation) String() string {
	return v.Object + ": " + strings.Join(v.Reasons, ", ")
}

// Refusal starts every Error's message: Helm wraps a post-renderer's error
// as text, so callers that only have Helm's error recognise it by this.
const Refusal = "refused by Pod Security"

// Error is a render refused by Pod Security.
type Error struct {
	Level      api.LevelVersion
	Violations []Violation
}

func (e *Error) Error() string {
	var parts []string
	for _, v := range e.Violations {
		parts = append(parts, v.String())
	}
	return fmt.Sprintf("%s %q (the namespace's pod-security.kubernetes.io/enforce level; a stack's pods are checked at baseline where it has none): %s",
		Refusal, e.Level.Level, strings.Join(parts, "; "))
}

var (
	evaluator policy.Evaluator
	volumes   policy.CheckPodFn
)

func init() {
	e, err := policy.NewEvaluator(policy.DefaultChecks(), nil)
	if err != nil {
		panic(fmt.Sprintf("the Pod Security library's checks: %v", err))
	}
	evaluator = e
	for _, c := range policy.DefaultChecks() {
		if c.ID == "restrictedVolumes" {
			volumes = c.Versions[len(c.Versions)-1].CheckPod
		}
	}
	if volumes == nil {
		panic("the Pod Security library has no restrictedVolumes check")
	}
}

// Check judges every pod template of the rendered manifest (YAML
// documents) at level; nil means every one complies.
func Check(manifest []byte, level api.LevelVersion) error {
	if level.Level == api.LevelPrivileged {
		return nil
	}
	templates, serviceAccounts, err := podTemplates(manifest)
	if err != nil {
		return err
	}
	var violations []Violation
	for _, t := range templates {
		var reasons []string
		results := evaluator.EvaluatePod(level, &t.meta, &t.spec)
		if level.Level == api.LevelBaseline {
			results = append(results, volumes(&t.meta, &t.spec))
		}
		agg := policy.AggregateCheckResults(results)
		if !agg.Allowed {
			for i, r := range agg.ForbiddenReasons {
				if d := agg.ForbiddenDetails[i]; d != "" {
					r += " (" + d + ")"
				}
				reasons = append(reasons, r)
			}
		}
		sa := t.spec.ServiceAccountName
		if sa == "" {
			sa = "default"
		}
		if !slices.Contains(serviceAccounts, sa) {
			reasons = append(reasons, fmt.Sprintf("ServiceAccount %q (pods of a stack run as the ServiceAccount the stack creates, not as an existing one)", sa))
		}
		if len(reasons) > 0 {
			violations = append(violations, Violation{Object: t.object, Reasons: reasons})
		}
	}
	if len(violations) > 0 {
		return &Error{Level: level, Violations: violations}
	}
	return nil
}

type podTemplate struct {
	object string
	meta   metav1.ObjectMeta
	spec   corev1.PodSpec
}

// podTemplates decodes the pod templates of the workloads in the manifest
// and the names of the ServiceAccounts it creates. A workload kind it
// does not know is an error: a pod it cannot see is not judged to comply.
func podTemplates(manifest []byte) ([]podTemplate, []string, error) {
	var out []podTemplate
	var serviceAccounts []string
	dec := utilyaml.NewDocumentDecoder(io.NopCloser(bytes.NewReader(manifest)))
	defer dec.Close()
	buf := make([]byte, len(manifest)+1)
	for {
		n, err := dec.Read(buf)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, nil, fmt.Errorf("reading the rendered manifest: %w", err)
		}
		// One YAML parse per document; the JSON is decoded twice (its
		// kind, then the workload), which costs a fraction of the parse.
		doc, err := yaml.YAMLToJSON(buf[:n])
		if err != nil {
			return nil, nil, fmt.Errorf("reading the rendered manifest: %w", err)
		}
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if err := json.Unmarshal(doc, &head); err != nil {
			return nil, nil, fmt.Errorf("reading the rendered manifest: %w", err)
		}
		key := head.Kind + "/" + head.Metadata.Name
		switch head.Kind {
		case "":
			continue
		case "ServiceAccount":
			serviceAccounts = append(serviceAccounts, head.Metadata.Name)
		case "Deployment":
			var d appsv1.Deployment
			if err := json.Unmarshal(doc, &d); err != nil {
				return nil, nil, fmt.Errorf("reading %s: %w", key, err)
			}
			out = append(out, podTemplate{object: key, meta: d.Spec.Template.ObjectMeta, spec: d.Spec.Template.Spec})
		case "Pod", "ReplicaSet", "StatefulSet", "DaemonSet", "Job", "CronJob", "ReplicationController", "PodTemplate":
			return nil, nil, fmt.Errorf("the release renders %s, a workload kind this check does not read", key)
		}
	}
	return out, serviceAccounts, nil
}
