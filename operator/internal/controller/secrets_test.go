package controller_test

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
)

// A plain-text access token still reaches the reader (compatibility), earns
// the stack a PlaintextAccessToken condition and never appears in its
// status; a token from a Secret reaches the reader without entering any
// ConfigMap, release manifest or status, and clears the condition.
func TestAccessTokenStaysOutOfStatus(t *testing.T) {
	e := startEnv(t, operatorBuild{})
	const stack, reader, token = "tokens", "tokens-inference-stack-hf", "hf_plainTextTokenValue123"
	manifest := func(u *unstructured.Unstructured) string {
		m, _, _ := unstructured.NestedString(u.Object, "status", "deployedRelease", "manifest")
		return m
	}

	e.apply(stack, "v0", `applications: {hf: {readerConfig: {accessToken: `+token+`}}}`)
	e.waitDeployed(stack)
	e.waitCondition(stack, "PlaintextAccessToken", "True", "AccessTokenInSpec")
	u := e.getStack(stack)
	if _, _, msg := condition(u, "PlaintextAccessToken"); !strings.Contains(msg, "spec.applications.hf.readerConfig.accessToken") || !strings.Contains(msg, "accessTokenFrom") {
		t.Errorf("condition message %q does not name the field and the way out", msg)
	}
	m := manifest(u)
	if !strings.Contains(m, "kind: ConfigMap") || !strings.Contains(m, "access_token: <redacted>") {
		t.Errorf("status.deployedRelease.manifest lacks the redacted reader config:\n%s", m)
	}
	if strings.Contains(m, token) {
		t.Fatal("status.deployedRelease.manifest carries the plain-text token")
	}
	cm := &corev1.ConfigMap{}
	if err := e.cl.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: reader}, cm); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(cm.Data["config.yaml"], "access_token: "+token) {
		t.Errorf("the reader no longer gets the plain-text token (compatibility):\n%s", cm.Data["config.yaml"])
	}

	// Move the token to a Secret.
	secret := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "hf-token", Namespace: ns}, StringData: map[string]string{"token": token}}
	if err := e.cl.Create(t.Context(), secret); err != nil {
		t.Fatal(err)
	}
	e.update(stack, func(u *unstructured.Unstructured) {
		unstructured.RemoveNestedField(u.Object, "spec", "applications", "hf", "readerConfig", "accessToken")
		_ = unstructured.SetNestedMap(u.Object, map[string]any{"secretKeyRef": map[string]any{"name": "hf-token", "key": "token"}},
			"spec", "applications", "hf", "accessTokenFrom")
	})
	e.waitCondition(stack, "PlaintextAccessToken", "False", "NoPlaintextAccessToken")
	e.eventually("the reader takes the token from the Secret", 60*time.Second, func(ctx context.Context) (bool, string) {
		for _, env := range e.deployment(reader).Spec.Template.Spec.Containers[0].Env {
			if env.Name == "TAKEOFF_ACCESS_TOKEN" && env.ValueFrom != nil && env.ValueFrom.SecretKeyRef != nil &&
				env.ValueFrom.SecretKeyRef.Name == "hf-token" && env.ValueFrom.SecretKeyRef.Key == "token" {
				return true, ""
			}
		}
		return false, fmt.Sprintf("env %v", e.deployment(reader).Spec.Template.Spec.Containers[0].Env)
	})
	if err := e.cl.Get(t.Context(), types.NamespacedName{Namespace: ns, Name: reader}, cm); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(cm.Data["config.yaml"], "access_token") {
		t.Errorf("a token from a Secret reached the ConfigMap:\n%s", cm.Data["config.yaml"])
	}
	if m := manifest(e.getStack(stack)); strings.Contains(m, token) || strings.Contains(m, "access_token") || !strings.Contains(m, "secretKeyRef") {
		t.Errorf("status.deployedRelease.manifest after the move:\n%s", m)
	}
}
