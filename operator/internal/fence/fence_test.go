package fence

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// TestFence drives the fence through the transports it wraps: lease writes
// open and close it, and a guarded client sends reads always and writes
// only while it is open.
func TestFence(t *testing.T) {
	var writes int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet {
			writes++
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	f := New(200 * time.Millisecond)
	leaseCfg, cfg := &rest.Config{Host: srv.URL}, &rest.Config{Host: srv.URL}
	f.ObserveLease(leaseCfg)
	f.Guard(cfg)
	lease, guarded := client(t, leaseCfg), client(t, cfg)
	do := func(c *http.Client, method, path, body string) error {
		req, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := c.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	const leasePath = "/apis/coordination.k8s.io/v1/namespaces/ns/leases/id"
	write := func() error { return do(guarded, http.MethodPost, "/api/v1/namespaces/ns/secrets", "{}") }

	if err := f.Check(); err == nil {
		t.Fatal("a fence that never saw the lease is open")
	}
	if err := write(); err == nil || !strings.Contains(err.Error(), "fenced: refusing POST /api/v1/namespaces/ns/secrets") {
		t.Fatalf("write before the lease is held: %v", err)
	}
	if err := do(guarded, http.MethodGet, "/api/v1/namespaces/ns/secrets", ""); err != nil {
		t.Fatalf("a read while fenced: %v", err)
	}
	if err := do(guarded, http.MethodPost, "/apis/authentication.k8s.io/v1/tokenreviews", "{}"); err != nil {
		t.Fatalf("a token review (the metrics endpoint's, on any replica) while fenced: %v", err)
	}
	// An event written through the lease's client names no holder: it
	// neither opens nor closes the fence.
	if err := do(lease, http.MethodPost, "/api/v1/namespaces/ns/events", `{"reason":"LeaderElection"}`); err != nil || f.Check() == nil {
		t.Fatalf("an event opened the fence (%v)", err)
	}
	if err := do(lease, http.MethodPut, leasePath, `{"spec":{"holderIdentity":"me"}}`); err != nil {
		t.Fatal(err)
	}
	if err := write(); err != nil {
		t.Fatalf("write just after a renewal: %v", err)
	}
	// Without another renewal the fence closes by itself.
	deadline := time.Now().Add(10 * time.Second)
	for f.Check() == nil {
		if time.Now().After(deadline) {
			t.Fatal("the fence stayed open without renewals")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := write(); err == nil || !strings.Contains(err.Error(), "last renewed") {
		t.Fatalf("write after the renew deadline: %v", err)
	}
	// Renewed, then released at shutdown.
	if err := do(lease, http.MethodPut, leasePath, `{"spec":{"holderIdentity":"me"}}`); err != nil || f.Check() != nil {
		t.Fatalf("renewal: %v, %v", err, f.Check())
	}
	if err := do(lease, http.MethodPut, leasePath, `{"spec":{"holderIdentity":""}}`); err != nil {
		t.Fatal(err)
	}
	if err := f.Check(); err == nil || !strings.Contains(err.Error(), "does not hold") {
		t.Fatalf("after the release: %v", err)
	}
	if writes != 6 { // the review, the event, three lease writes, one guarded write
		t.Errorf("the server saw %d writes, want 6", writes)
	}
}

func client(t *testing.T, cfg *rest.Config) *http.Client {
	c, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// A replica stalled after the fence let a write through, and resumed once
// the fence has closed, must not send it: the fence is checked again as
// the body goes out, and the server receives no write.
func TestFenceClosingBeforeTheBodyIsSent(t *testing.T) {
	var writes int
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if _, err := io.ReadAll(r.Body); err == nil && r.Method != http.MethodGet {
			writes++
		}
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	f := New(time.Hour)
	f.renewed = time.Now() // open
	cfg := &rest.Config{Host: srv.URL}
	// Between the fence's first check and the transport: the stall, after
	// which the lease is no longer this replica's.
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			f.mu.Lock()
			f.renewed = time.Time{}
			f.mu.Unlock()
			return rt.RoundTrip(r)
		})
	})
	f.Guard(cfg)
	req, err := http.NewRequest(http.MethodPost, srv.URL+"/api/v1/namespaces/ns/secrets", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := client(t, cfg).Do(req)
	if err == nil {
		resp.Body.Close()
	}
	if err == nil || !strings.Contains(err.Error(), "fenced: refusing to send the body of POST /api/v1/namespaces/ns/secrets") {
		t.Errorf("a write whose fence closed before its body was sent: %v", err)
	}
	if writes != 0 {
		t.Errorf("the server received %d writes", writes)
	}
}
