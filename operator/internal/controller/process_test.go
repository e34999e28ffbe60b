package controller_test

import (
	"bytes"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/titanml/inference-stack-operator/e2e/harness/operatorproc"
)

// The lifecycle tests run the operator as the binary OLM deploys, in
// separate processes they can SIGKILL, restart and run side by side for two
// majors.

// builds holds the operator built once per major for this test binary.
var builds = &operatorproc.Builds{}

func TestMain(m *testing.M) {
	// controller-runtime drops every log if no logger is set within 30 s
	// of the first one, and keeps the first it is given: set it now, for
	// the in-process operators to switch to their tests' logs.
	operatorproc.LogTo(io.Discard)
	dir, err := os.MkdirTemp("", "operator-builds-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	builds.Dir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

// operatorProcess is one operator process of a test: started and stopped
// by it, killed and its log shown when the test ends.
type operatorProcess struct {
	t testing.TB
	*operatorproc.Process
}

// newOperatorProcess returns the operator of major ("v0" is this source
// tree's VERSION; "v1" is the same source stamped 1.0.0, as the next major
// would be) against kubeconfig, not yet started.
func newOperatorProcess(t testing.TB, name, major, kubeconfig string, extra ...string) *operatorProcess {
	bin, err := builds.Binary(t.Context(), major)
	if err != nil {
		t.Fatal(err)
	}
	p := &operatorProcess{t: t, Process: operatorproc.New(operatorproc.Spec{
		Name: name, Binary: bin,
		Log: filepath.Join(t.TempDir(), name+".log"),
		Args: append([]string{
			"--kubeconfig=" + kubeconfig,
			"--metrics-bind-address=0",
			"--health-probe-bind-address=0",
			"--zap-log-level=debug",
		}, extra...),
	})}
	t.Cleanup(func() {
		p.Kill(syscall.SIGKILL)
		if t.Failed() {
			p.WriteTail(t.Output(), 80)
		}
	})
	return p
}

func (p *operatorProcess) start() {
	p.t.Helper()
	if err := p.Start(); err != nil {
		p.t.Fatal(err)
	}
}

// apiProxy stands between an operator process and the API server, so a test
// can act at an exact point of the operator's conversation with the cluster:
// after the proxy forwards a request hook matches (and before the operator
// sees the response), it calls onMatch once.
type apiProxy struct {
	url     string
	mu      sync.Mutex
	hook    func(r *http.Request, body []byte) bool
	onMatch func()
	// writes records every request but GET the proxy forwarded.
	writes []proxiedWrite
}

// proxiedWrite is one write an operator sent through the proxy.
type proxiedWrite struct {
	at           time.Time
	method, path string
}

func startAPIProxy(t testing.TB, cfg *rest.Config) *apiProxy {
	target, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	rt, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	p := &apiProxy{}
	rp := httputil.NewSingleHostReverseProxy(target)
	rp.FlushInterval = -1 // watches stream
	rp.Transport = roundTripFunc(func(r *http.Request) (*http.Response, error) {
		var body []byte
		if r.Body != nil {
			var err error
			if body, err = io.ReadAll(r.Body); err != nil {
				// The client gave up before its body was sent (a fenced
				// write does): nothing reaches the API server.
				return nil, fmt.Errorf("reading the request body: %w", err)
			}
			r.Body = io.NopCloser(bytes.NewReader(body))
		}
		if r.Method != http.MethodGet {
			p.mu.Lock()
			p.writes = append(p.writes, proxiedWrite{at: time.Now(), method: r.Method, path: r.URL.Path})
			p.mu.Unlock()
		}
		resp, err := rt.RoundTrip(r)
		p.mu.Lock()
		matched := p.hook != nil && p.hook(r, body)
		if matched {
			p.hook = nil
		}
		onMatch := p.onMatch
		p.mu.Unlock()
		if matched {
			onMatch()
		}
		return resp, err
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(func() { _ = srv.Close() })
	p.url = "http://" + l.Addr().String()
	return p
}

// writesSince returns the writes the proxy forwarded after t.
func (p *apiProxy) writesSince(t time.Time) []proxiedWrite {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []proxiedWrite
	for _, w := range p.writes {
		if w.at.After(t) {
			out = append(out, w)
		}
	}
	return out
}

// arm makes the proxy call onMatch after forwarding the first request hook
// matches.
func (p *apiProxy) arm(hook func(r *http.Request, body []byte) bool, onMatch func()) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.hook, p.onMatch = hook, onMatch
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// writeKubeconfig writes a kubeconfig for server with no credentials (the
// proxy adds them).
func writeKubeconfig(t testing.TB, server string) string {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["proxy"] = &clientcmdapi.Cluster{Server: server}
	cfg.AuthInfos["proxy"] = &clientcmdapi.AuthInfo{}
	cfg.Contexts["proxy"] = &clientcmdapi.Context{Cluster: "proxy", AuthInfo: "proxy"}
	cfg.CurrentContext = "proxy"
	path := filepath.Join(t.TempDir(), "kubeconfig")
	if err := clientcmd.WriteToFile(*cfg, path); err != nil {
		t.Fatal(err)
	}
	return path
}

// releaseWrite matches Helm's write of a new revision of stack's release in
// state status ("pending-install", "pending-upgrade").
func releaseWrite(stack, status string) func(*http.Request, []byte) bool {
	return func(r *http.Request, body []byte) bool {
		return r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/secrets") &&
			bytes.Contains(body, []byte("sh.helm.release.v1."+stack+".v")) && bytes.Contains(body, []byte(status))
	}
}
