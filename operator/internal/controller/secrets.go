package controller

import (
	"fmt"
	"regexp"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A stack may still carry its model hub token in plain text
// (readerConfig.accessToken, as chart 1.0.0 took it). The chart keeps
// rendering it into the reader's config for compatibility; the operator
// says so on the stack, and keeps the token out of the status, which
// helm-operator-plugins fills with the release manifest (ConfigMaps
// included) for anyone who may read the stack.
const (
	conditionPlaintextAccessToken = "PlaintextAccessToken"
	reasonAccessTokenInSpec       = "AccessTokenInSpec"
	reasonNoPlaintextAccessToken  = "NoPlaintextAccessToken"

	// redacted replaces a token in status.deployedRelease.manifest.
	redacted = "<redacted>"
)

// plaintextTokens returns the places in obj's spec that hold a plain-text
// access token and the tokens themselves.
func plaintextTokens(obj *unstructured.Unstructured) (paths, tokens []string) {
	add := func(path string, readerConfig any) {
		rc, _ := readerConfig.(map[string]any)
		if tok, _ := rc["accessToken"].(string); tok != "" {
			paths = append(paths, path+".readerConfig.accessToken")
			tokens = append(tokens, tok)
		}
	}
	tmpl, _, _ := unstructured.NestedMap(obj.Object, "spec", "applicationTemplate")
	add("spec.applicationTemplate", tmpl["readerConfig"])
	apps, _, _ := unstructured.NestedMap(obj.Object, "spec", "applications")
	names := make([]string, 0, len(apps))
	for name := range apps {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		app, _ := apps[name].(map[string]any)
		add("spec.applications."+name, app["readerConfig"])
	}
	return paths, tokens
}

// tokenCondition is the PlaintextAccessToken condition obj should carry:
// True while a plain-text token is set, False once one was reported and is
// gone; ok is false when the stack never had one (no condition at all).
func tokenCondition(obj *unstructured.Unstructured) (c condition, ok bool) {
	paths, _ := plaintextTokens(obj)
	if len(paths) > 0 {
		return condition{Type: conditionPlaintextAccessToken, Status: "True", Reason: reasonAccessTokenInSpec,
			Message: fmt.Sprintf("%s holds the model hub token in plain text: it is stored in the stack, its Helm release and the reader's ConfigMap, "+
				"readable by anyone who can read those; put it in a Secret and set accessTokenFrom.secretKeyRef instead", strings.Join(paths, ", "))}, true
	}
	if _, had := conditionOf(obj, conditionPlaintextAccessToken); had {
		return condition{Type: conditionPlaintextAccessToken, Status: "False", Reason: reasonNoPlaintextAccessToken,
			Message: "no access token is set in plain text"}, true
	}
	return condition{}, false
}

// accessTokenLine is a reader config line holding a token, as the chart
// renders it (toYaml, under takeoff.readers_config.<application>).
var accessTokenLine = regexp.MustCompile(`(?m)^(\s*access_token:)\s.*$`)

// redactDeployedRelease removes the plain-text tokens of obj's spec from
// status.deployedRelease.manifest: every occurrence of a token, and the
// value of every access_token line (in case YAML quoted the token).
//
// The library compares the manifest it would write with the stored one, so
// for a stack with a plain-text token each reconcile writes the status once
// more; stacks without one are left byte for byte as the library wrote them.
func redactDeployedRelease(obj *unstructured.Unstructured) {
	manifest, found, _ := unstructured.NestedString(obj.Object, "status", "deployedRelease", "manifest")
	if !found || manifest == "" {
		return
	}
	_, tokens := plaintextTokens(obj)
	if out := redactManifest(manifest, tokens); out != manifest {
		_ = unstructured.SetNestedField(obj.Object, out, "status", "deployedRelease", "manifest")
	}
}

// redactManifest is manifest without tokens, and without the value of any
// access_token line.
func redactManifest(manifest string, tokens []string) string {
	out := manifest
	for _, tok := range tokens {
		out = strings.ReplaceAll(out, tok, redacted)
	}
	return accessTokenLine.ReplaceAllString(out, "${1} "+redacted)
}
