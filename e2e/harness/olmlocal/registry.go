package olmlocal

import (
	"bytes"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"time"

	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// Registry is an OCI registry (go-containerregistry's pkg/registry, in
// memory) served over TLS on 127.0.0.1 with a certificate of the harness CA.
type Registry struct {
	// Addr is host:port, e.g. 127.0.0.1:40123: the registry part of image
	// references pushed to and pulled from it.
	Addr string
	ca   *CA
	srv  *http.Server
	done chan error
}

// StartRegistry serves a new, empty registry on host (an address of this
// machine; "" means 127.0.0.1) until Stop. Requests are logged to logw (nil
// discards them).
func StartRegistry(ca *CA, host string, logw io.Writer) (*Registry, error) {
	if logw == nil {
		logw = io.Discard
	}
	if host == "" {
		host = "127.0.0.1"
	}
	cert, err := ca.ServingTLS("localhost", "127.0.0.1", host)
	if err != nil {
		return nil, err
	}
	l, err := net.Listen("tcp", net.JoinHostPort(host, "0"))
	if err != nil {
		return nil, fmt.Errorf("registry listener: %w", err)
	}
	r := &Registry{Addr: l.Addr().String(), ca: ca, done: make(chan error, 1)}
	r.srv = &http.Server{
		Handler:           bufferBodies(registry.New(registry.Logger(log.New(logw, "registry: ", log.LstdFlags)))),
		TLSConfig:         &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12},
		ReadHeaderTimeout: 30 * time.Second,
		ErrorLog:          log.New(logw, "registry: ", log.LstdFlags),
	}
	go func() { r.done <- r.srv.ServeTLS(l, "", "") }()
	return r, nil
}

// bufferBodies reads a request's body whole before h sees it. The
// registry copies an upload's body while it holds its one lock; over
// HTTP/2 the uploads of a push share one connection's flow-control window,
// so a handler waiting under the lock for the rest of its body, while the
// unread bytes of another upload (whose handler waits for the lock) fill
// that window, waits for good: a push under load hung for 15 minutes that
// way. Read first, the body is whole before the lock is taken.
func bufferBodies(h http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		if req.Body != nil && req.Body != http.NoBody {
			body, err := io.ReadAll(req.Body)
			req.Body.Close()
			if err != nil {
				http.Error(w, fmt.Sprintf("reading the request body: %v", err), http.StatusBadRequest)
				return
			}
			req.Body = io.NopCloser(bytes.NewReader(body))
		}
		h.ServeHTTP(w, req)
	})
}

// Transport is an HTTP transport that trusts the registry's certificate.
func (r *Registry) Transport() http.RoundTripper {
	t := remote.DefaultTransport.(*http.Transport).Clone()
	t.TLSClientConfig = &tls.Config{RootCAs: r.ca.Pool(), MinVersion: tls.VersionTLS12}
	return t
}

// Stop shuts the registry down.
func (r *Registry) Stop(ctx context.Context) error {
	err := r.srv.Shutdown(ctx)
	if serveErr := <-r.done; serveErr != nil && !errors.Is(serveErr, http.ErrServerClosed) {
		err = errors.Join(err, serveErr)
	}
	return err
}
