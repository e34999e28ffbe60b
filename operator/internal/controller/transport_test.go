package controller

import (
	"encoding/pem"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/cli-runtime/pkg/resource"
	"k8s.io/client-go/rest"
	ctrl "sigs.k8s.io/controller-runtime"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
)

// Helm's clients use the manager's transport: a client built from Helm's
// configuration after the CA and token files are gone (as cli-runtime
// builds one for every object of every render) reads neither, and still
// reaches the API server over TLS with the manager's credentials.
func TestHelmClientsShareTheManagersTransport(t *testing.T) {
	const token = "the-service-account-token"
	srv := httptest.NewTLSServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if got := r.Header.Get("Authorization"); got != "Bearer "+token {
			http.Error(w, "unauthorized: "+got, http.StatusUnauthorized)
			return
		}
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(`{"apiVersion":"v1","kind":"Secret","metadata":{"name":"s","namespace":"ns"}}`))
	}))
	defer srv.Close()
	dir := t.TempDir()
	caFile, tokenFile := filepath.Join(dir, "ca.crt"), filepath.Join(dir, "token")
	ca := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: srv.Certificate().Raw})
	if err := os.WriteFile(caFile, ca, 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tokenFile, []byte(token), 0o600); err != nil {
		t.Fatal(err)
	}
	mgr, err := ctrl.NewManager(&rest.Config{Host: srv.URL, TLSClientConfig: rest.TLSClientConfig{CAFile: caFile}, BearerTokenFile: tokenFile},
		ctrl.Options{Metrics: metricsserver.Options{BindAddress: "0"}})
	if err != nil {
		t.Fatal(err)
	}
	cfg := helmRESTConfig(mgr)
	if err := os.Remove(caFile); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(tokenFile); err != nil {
		t.Fatal(err)
	}

	// As cli-runtime's builder makes an object's client.
	cfg.ContentConfig = resource.UnstructuredPlusDefaultContentConfig()
	cfg.GroupVersion = &corev1.SchemeGroupVersion
	cfg.APIPath = "/api"
	rc, err := rest.RESTClientFor(cfg)
	if err != nil {
		t.Fatalf("building a client from Helm's configuration read the files again: %v", err)
	}
	body, err := rc.Get().Namespace("ns").Resource("secrets").Name("s").DoRaw(t.Context())
	if err != nil {
		t.Fatalf("reading through Helm's client: %v (%s)", err, body)
	}
}
