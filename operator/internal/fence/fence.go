// Package fence keeps a replica that is no longer sure to lead from writing
// to the cluster.
//
// Leader election alone is not a fence: a leader stalled past its lease (a
// long GC pause, CPU starvation, a stopped process) resumes in the middle
// of whatever it was doing — a Helm install, a release record update — and
// goes on writing until its renew loop notices, up to the renew deadline
// later, by when a new leader has been writing for a while. The fence
// closes the moment this replica cannot prove it still holds the lease:
// every write of the process, except the lease's own, is refused once the
// last successful renewal (timed from when it was sent) is older than the
// renew deadline. Another replica cannot take the lease until a full lease
// duration after that renewal, so the margin between the two is the time a
// write already on the wire has to land.
package fence

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

// Fence is open while this replica's last lease renewal is recent enough.
type Fence struct {
	renewDeadline time.Duration

	mu sync.Mutex
	// renewed is when the last successful acquisition or renewal was sent
	// (monotonic, so a stalled process sees the stall); zero when the
	// lease was never held or has been released.
	renewed time.Time
}

// New returns a closed fence for a lease renewed within renewDeadline.
func New(renewDeadline time.Duration) *Fence {
	return &Fence{renewDeadline: renewDeadline}
}

// Check returns nil while the fence is open, and otherwise why it is closed.
func (f *Fence) Check() error {
	f.mu.Lock()
	renewed := f.renewed
	f.mu.Unlock()
	if renewed.IsZero() {
		return fmt.Errorf("not the leader: this replica does not hold the leader-election lease")
	}
	if since := time.Since(renewed); since > f.renewDeadline {
		return fmt.Errorf("no longer sure to lead: the leader-election lease was last renewed %s ago (renew deadline %s)",
			since.Round(time.Millisecond), f.renewDeadline)
	}
	return nil
}

// ObserveLease makes cfg (the leader election's client configuration) tell
// the fence about every write of the lease: a successful write naming a
// holder is this replica acquiring or renewing it (the elector writes no
// other holder), a write with no holder is its release.
func (f *Fence) ObserveLease(cfg *rest.Config) {
	// The holder is read from the request body: JSON, whatever the
	// client's defaults (CBOR) would be.
	cfg.ContentType = "application/json"
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if (r.Method != http.MethodPut && r.Method != http.MethodPost) || !strings.Contains(r.URL.Path, "/leases") {
				return rt.RoundTrip(r)
			}
			holder, err := leaseHolder(r)
			if err != nil {
				return nil, err
			}
			if holder != nil && *holder == "" {
				// Releasing: closed before the lease is free for another
				// replica, whatever the answer.
				f.mu.Lock()
				f.renewed = time.Time{}
				f.mu.Unlock()
			}
			sent := time.Now()
			resp, err := rt.RoundTrip(r)
			if err == nil && resp.StatusCode/100 == 2 && holder != nil {
				f.mu.Lock()
				if *holder == "" {
					f.renewed = time.Time{}
				} else if sent.After(f.renewed) {
					f.renewed = sent
				}
				f.mu.Unlock()
			}
			return resp, err
		})
	})
}

// leaseHolder reads the holder a lease write names (nil if it names
// none), keeping the body.
func leaseHolder(r *http.Request) (*string, error) {
	if r.Body == nil {
		return nil, nil
	}
	body, err := io.ReadAll(r.Body)
	r.Body.Close()
	if err != nil {
		return nil, fmt.Errorf("reading a lease write: %w", err)
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	r.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
	var lease struct {
		Spec struct {
			HolderIdentity *string `json:"holderIdentity"`
		} `json:"spec"`
	}
	if err := json.Unmarshal(body, &lease); err != nil {
		return nil, nil
	}
	return lease.Spec.HolderIdentity, nil
}

// Guard makes every client built from cfg refuse to send a write (any
// request but GET, HEAD and OPTIONS, watches included, and token and access
// reviews) while the fence is closed. cfg must not be the leader
// election's own configuration.
//
// The fence is checked when the request is handed to the transport and
// again when the transport reads the first bytes of its body (of every
// body it sends: a retry below this wrapper sends a new one), the last
// step before they go on the wire: a replica stalled in between (with
// many requests in flight, some always are) resumes to find the fence
// closed, and the request fails with its body unsent, which the API
// server never applies. What is left is the stall of a goroutine between
// that read and the socket write, and a write already on the wire: the
// margin (lease duration minus renew deadline) covers those.
func (f *Fence) Guard(cfg *rest.Config) {
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			switch {
			case r.Method == http.MethodGet, r.Method == http.MethodHead, r.Method == http.MethodOptions,
				// Reviews are questions, not writes: the metrics
				// endpoint authenticates and authorizes its scrapers
				// with them on every replica, leader or not.
				strings.HasSuffix(r.URL.Path, "/tokenreviews"), strings.HasSuffix(r.URL.Path, "/subjectaccessreviews"):
				return rt.RoundTrip(r)
			}
			if err := f.Check(); err != nil {
				if r.Body != nil {
					r.Body.Close()
				}
				return nil, fmt.Errorf("fenced: refusing %s %s: %w", r.Method, strings.SplitN(r.URL.Path, "?", 2)[0], err)
			}
			if r.Body != nil && r.Body != http.NoBody {
				r = r.Clone(r.Context())
				what := r.Method + " " + r.URL.Path
				r.Body = &fencedBody{ReadCloser: r.Body, fence: f, what: what}
				// The transport resends a request from GetBody when the
				// server refused it unprocessed (HTTP/2's GOAWAY and
				// REFUSED_STREAM, as an API server draining for an
				// upgrade sends, retried after up to seconds): each body
				// it sends is fenced alike.
				if getBody := r.GetBody; getBody != nil {
					r.GetBody = func() (io.ReadCloser, error) {
						body, err := getBody()
						if err != nil || body == nil || body == http.NoBody {
							return body, err
						}
						return &fencedBody{ReadCloser: body, fence: f, what: what}, nil
					}
				}
			}
			return rt.RoundTrip(r)
		})
	})
}

// fencedBody checks the fence before its first bytes are read.
type fencedBody struct {
	io.ReadCloser
	fence   *Fence
	what    string
	checked bool
}

func (b *fencedBody) Read(p []byte) (int, error) {
	if !b.checked {
		if err := b.fence.Check(); err != nil {
			return 0, fmt.Errorf("fenced: refusing to send the body of %s: %w", b.what, err)
		}
		b.checked = true
	}
	return b.ReadCloser.Read(p)
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
