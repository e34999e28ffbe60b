package olmlocal

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestRegistryConcurrentUploads: two uploads share one HTTP/2 connection,
// the first one's body arriving slowly. The registry holds one lock while
// it copies an upload's body, so without bufferBodies the first upload's
// handler waits under the lock for the rest of its body while the second
// upload's unread bytes fill the connection's flow-control window: neither
// ever finishes (a push under load hung like this for 15 minutes).
func TestRegistryConcurrentUploads(t *testing.T) {
	ca, err := NewCA()
	if err != nil {
		t.Fatal(err)
	}
	reg, err := StartRegistry(ca, "127.0.0.1", nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = reg.Stop(context.Background()) })
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	client := &http.Client{Transport: reg.Transport()}
	base := "https://" + reg.Addr

	// Two upload sessions.
	var sessions []string
	for range 2 {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, base+"/v2/test/blobs/uploads/", nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("the registry answered over %s; this test needs HTTP/2", resp.Proto)
		}
		loc := resp.Header.Get("Location")
		if !strings.HasPrefix(loc, "http") {
			loc = base + loc
		}
		sessions = append(sessions, loc)
	}
	patch := func(loc string, body io.Reader) error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPatch, loc, body)
		req.Header.Set("Content-Type", "application/octet-stream")
		resp, err := client.Do(req)
		if err != nil {
			return err
		}
		defer resp.Body.Close()
		if resp.StatusCode/100 != 2 {
			b, _ := io.ReadAll(resp.Body)
			return fmt.Errorf("%s: %s", resp.Status, b)
		}
		return nil
	}

	// The slow upload: its first bytes, then nothing until the large one
	// has been sent.
	slowR, slowW := io.Pipe()
	slowDone := make(chan error, 1)
	go func() { slowDone <- patch(sessions[0], slowR) }()
	if _, err := slowW.Write([]byte("first bytes of a slow upload")); err != nil {
		t.Fatal(err)
	}
	// Larger than the connection's flow-control window (1 MiB).
	large := bytes.Repeat([]byte("x"), 4<<20)
	largeDone := make(chan error, 1)
	go func() { largeDone <- patch(sessions[1], bytes.NewReader(large)) }()

	select {
	case err := <-largeDone:
		if err != nil {
			t.Fatalf("the large upload: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the large upload did not finish while the slow one was open: the registry's lock and HTTP/2 flow control deadlocked")
	}
	if _, err := slowW.Write([]byte(", and the rest")); err != nil {
		t.Fatal(err)
	}
	slowW.Close()
	select {
	case err := <-slowDone:
		if err != nil {
			t.Fatalf("the slow upload: %v", err)
		}
	case <-ctx.Done():
		t.Fatal("the slow upload did not finish")
	}
}
