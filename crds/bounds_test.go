package crds_test

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"

	"github.com/titanml/inference-stack-operator/crds"
	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/operator/api/v1alpha1"
)

// stackOf is a stack with spec as given (a spec built in Go, too large to
// write as YAML).
func stackOf(name string, spec map[string]any) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "models.takeoff.co/v1alpha1",
		"kind":       "InferenceStack",
		"metadata":   map[string]any{"name": name, "labels": map[string]any{"operatorVersion": "v0"}},
		"spec":       spec,
	}}
}

// emptyApplications are n applications without settings: each renders the
// template alone.
func emptyApplications(n int) map[string]any {
	apps := map[string]any{}
	for i := range n {
		apps[fmt.Sprintf("a%02d", i)] = map[string]any{}
	}
	return apps
}

// largeApplication is an application (or template) at the bounds of the
// fields a stack fills to amplify itself, with values a working stack
// could have: every list and map full, every string of them at its
// maximum length.
func largeApplication() map[string]any {
	var env []any
	for i := range 128 {
		env = append(env, map[string]any{"name": fmt.Sprintf("VAR_%03d", i), "value": ""})
	}
	// The values of one env list total at most MaxValues: two at MaxValue.
	env[0].(map[string]any)["value"] = strings.Repeat("e", v1alpha1.MaxValue)
	env[1].(map[string]any)["value"] = strings.Repeat("f", v1alpha1.MaxValue)

	annotations := map[string]any{}
	key := func(i int) string { return fmt.Sprintf("example.com/k%d", i) }
	// Keys and values total MaxValues: two values that fill it.
	annotations[key(0)] = strings.Repeat("a", v1alpha1.MaxValue-len(key(0)))
	annotations[key(1)] = strings.Repeat("b", v1alpha1.MaxValue-len(key(1)))

	labels := map[string]any{}
	for i := range 64 {
		labels[fmt.Sprintf("example.com/label-%d", i)] = strings.Repeat("l", 63)
	}
	selector := map[string]any{}
	for i := range 32 {
		selector[fmt.Sprintf("example.com/node-%d", i)] = strings.Repeat("n", 63)
	}
	var volumes, mounts, tolerations []any
	for i := range 32 {
		name := fmt.Sprintf("v%d", i)
		volumes = append(volumes, map[string]any{"name": name, "persistentVolumeClaim": map[string]any{"claimName": strings.Repeat("c", 253)}})
		mounts = append(mounts, map[string]any{"name": name, "mountPath": "/" + strings.Repeat("m", v1alpha1.MaxPath-1)})
		tolerations = append(tolerations, map[string]any{"key": fmt.Sprintf("example.com/taint-%d", i), "operator": "Equal", "value": strings.Repeat("t", 63), "effect": "NoSchedule"})
	}
	var command []any
	for range 16 {
		command = append(command, strings.Repeat("x", v1alpha1.MaxArgument))
	}
	var values []any
	for i := range 64 {
		values = append(values, fmt.Sprintf("%063d", i))
	}
	return map[string]any{
		"env":            env,
		"podAnnotations": annotations,
		"podLabels":      labels,
		"nodeSelector":   selector,
		"volumes":        volumes,
		"volumeMounts":   mounts,
		"tolerations":    tolerations,
		"livenessProbe":  map[string]any{"exec": map[string]any{"command": command}},
		"resources":      map[string]any{"limits": map[string]any{"nvidia.com/gpu": 1, "cpu": "4", "memory": "64Gi"}},
		"affinity": map[string]any{"nodeAffinity": map[string]any{"requiredDuringSchedulingIgnoredDuringExecution": map[string]any{
			"nodeSelectorTerms": []any{map[string]any{"matchExpressions": []any{map[string]any{"key": "example.com/zone", "operator": "In", "values": values}}}},
		}}},
		"readerConfig": map[string]any{"modelName": strings.Repeat("m", 512), "device": "cuda", "tensorParallel": 2},
		"service":      map[string]any{"annotations": map[string]any{"example.com/s": "x"}},
	}
}

// The bounds (operator/api/v1alpha1/bounds.go) as the API server applies
// them: a stack that amplifies itself through the template is refused, with
// the field's path; a large stack within the bounds is stored.
func TestSizeBoundsOnAPIServer(t *testing.T) {
	c := localcluster.StartForTest(t, localcluster.Options{Nodes: []localcluster.Node{}, WithoutScheduler: true, WithoutControllerManager: true})
	ctx := t.Context()
	// Installing the CRD is the API server's check of its CEL rules' cost.
	if err := crds.Install(ctx, c.RESTConfig()); err != nil {
		t.Fatal(err)
	}
	stacks := dynamic.NewForConfigOrDie(c.RESTConfig()).Resource(gvr).Namespace("default")
	huge := strings.Repeat("x", 1300<<10) // 1.3 MiB

	t.Run("large stack at the bounds is accepted", func(t *testing.T) {
		apps := emptyApplications(v1alpha1.MaxApplications)
		apps["a00"] = largeApplication()
		spec := map[string]any{
			"applicationTemplate": largeApplication(),
			"applications":        apps,
			"gateway":             largeApplication(),
		}
		delete(spec["gateway"].(map[string]any), "readerConfig")
		var pullSecrets []any
		for i := range 16 {
			pullSecrets = append(pullSecrets, map[string]any{"name": fmt.Sprintf("registry-%d", i)})
		}
		spec["imagePullSecrets"] = pullSecrets
		created, err := stacks.Create(ctx, stackOf("large", spec), metav1.CreateOptions{})
		if err != nil {
			t.Fatalf("a stack within the bounds was refused: %v", err)
		}
		got, _, _ := unstructured.NestedSlice(created.Object, "spec", "applicationTemplate", "env")
		if v, _ := got[0].(map[string]any)["value"].(string); len(v) != v1alpha1.MaxValue {
			t.Errorf("the template's first env value came back with %d characters, want %d", len(v), v1alpha1.MaxValue)
		}
	})

	rejected := []struct {
		name string
		spec map[string]any
		// want are substrings of the API server's message: the field
		// path and the reason.
		want []string
	}{
		{
			// The amplification found: one 1.3 MiB value, rendered into
			// each of 32 Deployments.
			name: "1.3 MiB env value in the template with 32 applications",
			spec: map[string]any{
				"applicationTemplate": map[string]any{"env": []any{map[string]any{"name": "PAYLOAD", "value": huge}}},
				"applications":        emptyApplications(32),
			},
			want: []string{"spec.applicationTemplate.env[0].value", "Too long"},
		},
		{
			name: "1.3 MiB in env values of at most MaxValue each",
			spec: map[string]any{
				"applicationTemplate": map[string]any{"env": chunks(huge, v1alpha1.MaxValue, func(i int, v string) any {
					return map[string]any{"name": fmt.Sprintf("PAYLOAD_%d", i), "value": v}
				})},
				"applications": emptyApplications(32),
			},
			want: []string{"spec.applicationTemplate.env", "the values of env may total at most 65536 characters"},
		},
		{
			name: "1.3 MiB in pod annotations of at most MaxValue each",
			spec: map[string]any{
				"applicationTemplate": map[string]any{"podAnnotations": asMap(chunks(huge, v1alpha1.MaxValue-20, func(i int, v string) any { return v }))},
				"applications":        emptyApplications(32),
			},
			want: []string{"spec.applicationTemplate.podAnnotations", "keys and values may total at most 65536 characters"},
		},
		{
			name: "33 applications",
			spec: map[string]any{"applications": emptyApplications(v1alpha1.MaxApplications + 1)},
			want: []string{"spec.applications", "Too many"},
		},
		{
			name: "a long string in an embedded Kubernetes type",
			spec: map[string]any{"applicationTemplate": map[string]any{"volumes": []any{map[string]any{"name": "v", "hostPath": map[string]any{"path": "/" + huge}}}}},
			want: []string{"spec.applicationTemplate.volumes[0].hostPath.path", "Too long"},
		},
		{
			name: "a long probe command",
			spec: map[string]any{"gateway": map[string]any{"livenessProbe": map[string]any{"exec": map[string]any{"command": []any{"sh", "-c", huge}}}}},
			want: []string{"spec.gateway.livenessProbe.exec.command[2]", "Too long"},
		},
		{
			name: "a long map key in an embedded Kubernetes type",
			spec: map[string]any{"applications": map[string]any{"a": map[string]any{"resources": map[string]any{"limits": map[string]any{"example.com/" + strings.Repeat("r", 400): 1}}}}},
			want: []string{"spec.applications[a].resources.limits", "size(k) <= 317"},
		},
		{
			name: "a long quantity",
			spec: map[string]any{"applications": map[string]any{"a": map[string]any{"resources": map[string]any{"requests": map[string]any{"memory": "1" + strings.Repeat("0", 100)}}}}},
			want: []string{"spec.applications.a.resources.requests.memory", "Too long"},
		},
		{
			name: "a long model name",
			spec: map[string]any{"applicationTemplate": map[string]any{"readerConfig": map[string]any{"modelName": huge}}},
			want: []string{"spec.applicationTemplate.readerConfig.modelName", "Too long"},
		},
	}
	for i, tc := range rejected {
		t.Run(tc.name, func(t *testing.T) {
			_, err := stacks.Create(ctx, stackOf(fmt.Sprintf("too-large-%d", i), tc.spec), metav1.CreateOptions{})
			assertInvalid(t, err, tc.want)
		})
	}
}

// chunks splits s into pieces of at most n characters, made into list
// items by item.
func chunks(s string, n int, item func(i int, piece string) any) []any {
	var out []any
	for i := 0; len(s) > 0; i++ {
		piece := s[:min(n, len(s))]
		s = s[len(piece):]
		out = append(out, item(i, piece))
	}
	return out
}

// asMap keys values by annotation keys.
func asMap(values []any) map[string]any {
	m := map[string]any{}
	for i, v := range values {
		m[fmt.Sprintf("example.com/k%d", i)] = v
	}
	return m
}
