package fence

import (
	"bytes"
	"crypto/tls"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/net/http2"
	"golang.org/x/net/http2/hpack"
	"k8s.io/client-go/rest"
)

// refusingServer is an HTTP/2 server that refuses the first stream of
// every connection unprocessed (RST_STREAM REFUSED_STREAM, as a server
// going away does with the streams it will not serve), after calling
// refused, and answers every later stream 200 once its body has arrived.
// It records the request bodies it received on streams it answered.
type refusingServer struct {
	ln      net.Listener
	refused func()

	mu     sync.Mutex
	bodies []string
}

func newRefusingServer(t *testing.T, refused func()) *refusingServer {
	t.Helper()
	// A certificate httptest made, for a TLS listener of this test's own
	// that speaks HTTP/2 frame by frame.
	cert := httptest.NewTLSServer(http.NotFoundHandler())
	certs := cert.TLS.Certificates
	cert.Close()
	ln, err := tls.Listen("tcp", "127.0.0.1:0", &tls.Config{Certificates: certs, NextProtos: []string{"h2"}})
	if err != nil {
		t.Fatal(err)
	}
	s := &refusingServer{ln: ln, refused: refused}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go s.serve(c)
		}
	}()
	return s
}

func (s *refusingServer) serve(c net.Conn) {
	defer c.Close()
	preface := make([]byte, len(http2.ClientPreface))
	if _, err := io.ReadFull(c, preface); err != nil {
		return
	}
	fr := http2.NewFramer(c, c)
	if fr.WriteSettings() != nil {
		return
	}
	first := true
	bodies := map[uint32]*bytes.Buffer{}
	for {
		frame, err := fr.ReadFrame()
		if err != nil {
			return
		}
		switch f := frame.(type) {
		case *http2.SettingsFrame:
			if !f.IsAck() {
				_ = fr.WriteSettingsAck()
			}
		case *http2.PingFrame:
			if !f.IsAck() {
				_ = fr.WritePing(true, f.Data)
			}
		case *http2.HeadersFrame:
			if first {
				first = false
				s.refused()
				_ = fr.WriteRSTStream(f.StreamID, http2.ErrCodeRefusedStream)
				continue
			}
			bodies[f.StreamID] = &bytes.Buffer{}
		case *http2.DataFrame:
			b := bodies[f.StreamID]
			if b == nil {
				continue
			}
			b.Write(f.Data())
			if f.StreamEnded() {
				s.mu.Lock()
				s.bodies = append(s.bodies, b.String())
				s.mu.Unlock()
				var hdr bytes.Buffer
				_ = hpack.NewEncoder(&hdr).WriteField(hpack.HeaderField{Name: ":status", Value: "200"})
				_ = fr.WriteHeaders(http2.HeadersFrameParam{StreamID: f.StreamID, BlockFragment: hdr.Bytes(), EndHeaders: true, EndStream: true})
			}
		}
	}
}

func (s *refusingServer) received() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.bodies...)
}

// A write the fence let through, refused unprocessed by an HTTP/2 server
// (as an API server draining for an upgrade refuses streams, exactly when
// renewals fail) and resent by the transport below the fence after the
// fence closed, must not reach the server: every body the transport
// sends is fenced, the one it gets again from GetBody too.
func TestFenceHoldsRetriedBodies(t *testing.T) {
	f := New(time.Hour)
	f.renewed = time.Now() // open
	srv := newRefusingServer(t, func() {
		// The lease is lost while the write is in flight.
		f.mu.Lock()
		f.renewed = time.Time{}
		f.mu.Unlock()
	})
	cfg := &rest.Config{Host: "https://" + srv.ln.Addr().String(), TLSClientConfig: rest.TLSClientConfig{Insecure: true}}
	f.Guard(cfg)
	c := client(t, cfg)
	req, err := http.NewRequest(http.MethodPost, cfg.Host+"/api/v1/namespaces/ns/secrets", strings.NewReader(`{"kind":"Secret"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp, err := c.Do(req)
	if err == nil {
		resp.Body.Close()
		if resp.ProtoMajor != 2 {
			t.Fatalf("the client spoke %s, not HTTP/2", resp.Proto)
		}
	}
	if got := srv.received(); len(got) > 0 {
		t.Fatalf("the server received %q after the fence closed (the request: %v)", got, err)
	}
	if err == nil || !strings.Contains(err.Error(), "fenced: refusing to send the body of POST /api/v1/namespaces/ns/secrets") {
		t.Errorf("the resent write: %v", err)
	}
}
