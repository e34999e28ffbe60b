package helmrecord

import (
	"bytes"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A signature covers what Helm and the operator read of a record, each
// part on its own: changing any of them, or moving a byte from one part to
// the next, voids it; a label nobody reads may come and go.
func TestSignatureCovers(t *testing.T) {
	key := bytes.Repeat([]byte{7}, keyBytes)
	record := func() *corev1.Secret {
		return &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Namespace: "tenant", Name: "sh.helm.release.v1.stack.v2", Labels: map[string]string{
				"name": "stack", "owner": "helm", "status": "deployed", "version": "2", "models.takeoff.co/reconciled-by": "v0", "modifiedAt": "1"}},
			Data: map[string][]byte{"release": []byte("H4sI...")},
		}
	}
	want := mac(key, record())
	for what, change := range map[string]func(*corev1.Secret){
		"namespace":            func(s *corev1.Secret) { s.Namespace = "other" },
		"name":                 func(s *corev1.Secret) { s.Name = "sh.helm.release.v1.stack.v3" },
		"release name label":   func(s *corev1.Secret) { s.Labels["name"] = "other" },
		"status label":         func(s *corev1.Secret) { s.Labels["status"] = "superseded" },
		"version label":        func(s *corev1.Secret) { s.Labels["version"] = "9" },
		"writer label":         func(s *corev1.Secret) { s.Labels["models.takeoff.co/reconciled-by"] = "v1" },
		"writer label removed": func(s *corev1.Secret) { delete(s.Labels, "models.takeoff.co/reconciled-by") },
		"writer label emptied": func(s *corev1.Secret) { s.Labels["models.takeoff.co/reconciled-by"] = "" },
		"payload":              func(s *corev1.Secret) { s.Data["release"] = []byte("H4sJ...") },
		"bytes moved between parts": func(s *corev1.Secret) {
			s.Namespace, s.Name = "tenantsh.helm.release.v1.stack.v", "2"
		},
	} {
		s := record()
		change(s)
		if bytes.Equal(mac(key, s), want) {
			t.Errorf("changing the %s keeps the signature", what)
		}
	}
	s := record()
	s.Labels["modifiedAt"] = "2"
	s.Labels["backup.example.com/taken"] = "yes"
	if !bytes.Equal(mac(key, s), want) {
		t.Error("a label the signature does not cover voids it")
	}
	if bytes.Equal(mac(bytes.Repeat([]byte{8}, keyBytes), record()), want) {
		t.Error("another key gives the same signature")
	}
}

func TestIsMajor(t *testing.T) {
	for m, want := range map[string]bool{"v0": true, "v12": true, "v": false, "0": false, "v1a": false, "../x": false, "v123": false, "": false} {
		if isMajor(m) != want {
			t.Errorf("isMajor(%q) = %v", m, !want)
		}
	}
}
