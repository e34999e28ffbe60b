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
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	inferencestack "github.com/titanml/inference-stack-operator"
	"github.com/titanml/inference-stack-operator/e2e/localcluster"
	"github.com/titanml/inference-stack-operator/internal/testinputs"
)

// The lifecycle tests run the operator as the binary OLM deploys, in
// separate processes they can SIGKILL, restart and run side by side for two
// majors.

var (
	buildOnce sync.Once
	buildDir  string
	builds    map[string]string
	buildErr  error
)

func TestMain(m *testing.M) {
	code := m.Run()
	if buildDir != "" {
		os.RemoveAll(buildDir)
	}
	os.Exit(code)
}

// operatorBinary returns the operator built for major ("v0" is this source
// tree's VERSION; "v1" is the same source stamped 1.0.0, as the next major
// would be), building both once per test binary. Under Bazel they are
// go_binary targets (//operator:operator and :operator_v1, with x_defs)
// that the BUILD file passes as runfiles (testinputs.OperatorBinaries).
func operatorBinary(t testing.TB, major string) string {
	t.Helper()
	buildOnce.Do(func() {
		var ok bool
		if builds, ok, buildErr = testinputs.Pairs(testinputs.OperatorBinaries); ok || buildErr != nil {
			for _, m := range []string{"v0", "v1"} {
				if _, found := builds[m]; !found && buildErr == nil {
					buildErr = fmt.Errorf("%s has no %s operator binary", testinputs.OperatorBinaries, m)
				}
			}
			return
		}
		root, err := localcluster.RepoRoot()
		if err != nil {
			buildErr = err
			return
		}
		dir, err := os.MkdirTemp("", "operator-builds-")
		if err != nil {
			buildErr = err
			return
		}
		buildDir = dir
		versionVar := inferencestack.ModulePath + "/operator/internal/version.Version"
		builds = map[string]string{}
		for m, ldflags := range map[string]string{"v0": "", "v1": "-X " + versionVar + "=1.0.0"} {
			out := filepath.Join(dir, "operator-"+m)
			cmd := exec.Command("go", "build", "-trimpath", "-ldflags", ldflags, "-o", out, "./operator")
			cmd.Dir = root
			cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
			if b, err := cmd.CombinedOutput(); err != nil {
				buildErr = fmt.Errorf("building the %s operator: %w\n%s", m, err, b)
				return
			}
			builds[m] = out
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return builds[major]
}

// operatorProcess is one operator process, restartable.
type operatorProcess struct {
	t    testing.TB
	name string
	bin  string
	args []string
	log  string

	mu   sync.Mutex
	cmd  *exec.Cmd
	done chan error
}

func newOperatorProcess(t testing.TB, name, major, kubeconfig string, extra ...string) *operatorProcess {
	p := &operatorProcess{
		t: t, name: name, bin: operatorBinary(t, major),
		log: filepath.Join(t.TempDir(), name+".log"),
		args: append([]string{
			"--kubeconfig=" + kubeconfig,
			"--metrics-bind-address=0",
			"--health-probe-bind-address=0",
			"--zap-log-level=debug",
		}, extra...),
	}
	t.Cleanup(func() {
		p.kill(syscall.SIGKILL)
		if t.Failed() {
			t.Logf("==== %s (last 80 lines of %s) ====\n%s", name, p.log, tailFile(p.log, 80))
		}
	})
	return p
}

func (p *operatorProcess) start() {
	p.t.Helper()
	p.mu.Lock()
	defer p.mu.Unlock()
	f, err := os.OpenFile(p.log, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644)
	if err != nil {
		p.t.Fatal(err)
	}
	fmt.Fprintf(f, "---- %s starting\n", time.Now().Format(time.RFC3339Nano))
	cmd := exec.Command(p.bin, p.args...)
	cmd.Stdout, cmd.Stderr = f, f
	if err := cmd.Start(); err != nil {
		f.Close()
		p.t.Fatalf("starting %s: %v", p.name, err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait(); f.Close() }()
	p.cmd, p.done = cmd, done
}

// kill sends sig and waits for the process to exit; it reports how long
// that took. A process that is not running is left alone.
func (p *operatorProcess) kill(sig syscall.Signal) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return 0
	}
	start := time.Now()
	_ = p.cmd.Process.Signal(sig)
	select {
	case <-p.done:
	case <-time.After(2 * time.Minute):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
	p.cmd = nil
	return time.Since(start)
}

// running reports whether the process is alive.
func (p *operatorProcess) running() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.cmd == nil {
		return false
	}
	select {
	case err := <-p.done:
		p.done <- err
		return false
	default:
		return true
	}
}

func (p *operatorProcess) logContains(s string) bool {
	b, _ := os.ReadFile(p.log)
	return bytes.Contains(b, []byte(s))
}

func tailFile(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	return tail(string(b), n)
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
			body, _ = io.ReadAll(r.Body)
			r.Body = io.NopCloser(bytes.NewReader(body))
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
