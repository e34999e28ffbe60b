package olmlocal

import (
	"archive/tar"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
)

// DeploymentRunner stands in for the kubelet for one Deployment whose pods
// KWOK only pretends to run (the operator's, created by OLM from the
// bundle): it runs the Deployment's single container as a host process —
// the exact binary of the image the pod template pins (pulled from the
// registry by digest, entrypoint extracted), with the container's args and
// env and its service account's identity — and restarts it whenever the
// template changes (an upgrade), or when it exits, with a back-off. Ports
// in args that bind every interface (":8443") are moved to free loopback
// ports.
type DeploymentRunner struct {
	Namespace, Name string

	cfg       *rest.Config
	dir       string
	transport remote.Option
	log       io.Writer

	mu       sync.Mutex
	proc     *Process
	image    string
	args     []string
	restarts int
	lastErr  error
	events   []string

	cancel context.CancelFunc
	done   chan struct{}
}

// RunDeployment starts a DeploymentRunner for namespace/name; it runs until
// Stop (or ctx ends). The Deployment need not exist yet.
func (o *OLM) RunDeployment(ctx context.Context, namespace, name string) *DeploymentRunner {
	ctx, cancel := context.WithCancel(ctx)
	r := &DeploymentRunner{
		Namespace: namespace, Name: name,
		cfg:       o.cfg,
		dir:       filepath.Join(o.Dir, "deployments", namespace+"_"+name),
		transport: remote.WithTransport(o.Registry.Transport()),
		log:       o.log,
		cancel:    cancel,
		done:      make(chan struct{}),
	}
	go r.loop(ctx)
	return r
}

// Image returns the image reference the running process was extracted
// from ("" when nothing runs).
func (r *DeploymentRunner) Image() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || !r.proc.Alive() {
		return ""
	}
	return r.image
}

// PID returns the running process's pid, or 0.
func (r *DeploymentRunner) PID() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.proc == nil || !r.proc.Alive() {
		return 0
	}
	return r.proc.PID
}

// Process returns the running process, or nil.
func (r *DeploymentRunner) Process() *Process {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.proc
}

// Err returns the last error met (pulling, starting, or the process
// exiting), or nil.
func (r *DeploymentRunner) Err() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.lastErr
}

// Events returns what the runner did, oldest first.
func (r *DeploymentRunner) Events() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.events)
}

// LogFile is where the process's output goes (appended across restarts).
func (r *DeploymentRunner) LogFile() string {
	return filepath.Join(r.dir, "container.log")
}

// Tail returns the last n lines of LogFile (all if n <= 0).
func (r *DeploymentRunner) Tail(n int) string {
	return tailFile(r.LogFile(), n)
}

// Stop stops the process and the runner.
func (r *DeploymentRunner) Stop() {
	r.cancel()
	<-r.done
}

func (r *DeploymentRunner) event(format string, args ...any) {
	msg := fmt.Sprintf("%s %s/%s: %s", time.Now().Format("15:04:05.000"), r.Namespace, r.Name, fmt.Sprintf(format, args...))
	r.mu.Lock()
	r.events = append(r.events, msg)
	r.mu.Unlock()
	fmt.Fprintln(r.log, msg)
}

func (r *DeploymentRunner) setErr(err error) {
	r.mu.Lock()
	r.lastErr = err
	r.mu.Unlock()
}

func (r *DeploymentRunner) loop(ctx context.Context) {
	defer close(r.done)
	defer func() {
		if p := r.Process(); p != nil {
			p.Stop(10 * time.Second)
		}
	}()
	cs, err := kubernetes.NewForConfig(r.cfg)
	if err != nil {
		r.setErr(err)
		return
	}
	backoff := time.Second
	var retryAt time.Time
	tick := time.NewTicker(250 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		d, err := cs.AppsV1().Deployments(r.Namespace).Get(ctx, r.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			if p := r.Process(); p != nil {
				r.event("Deployment deleted: stopping pid %d", p.PID)
				p.Stop(10 * time.Second)
				r.mu.Lock()
				r.proc, r.image, r.args = nil, "", nil
				r.mu.Unlock()
			}
			continue
		}
		if err != nil {
			continue // transient; the next tick retries
		}
		c, sa, err := container(d)
		if err != nil {
			r.setErr(err)
			continue
		}
		r.mu.Lock()
		p, image, args := r.proc, r.image, r.args
		r.mu.Unlock()
		changed := image != c.Image || !slices.Equal(args, c.Args)
		crashed := p != nil && !p.Alive() && !changed
		if p != nil && p.Alive() && !changed {
			backoff = time.Second
			continue
		}
		if time.Now().Before(retryAt) {
			continue
		}
		if crashed {
			r.mu.Lock()
			r.restarts++
			r.lastErr = fmt.Errorf("%s exited (%v); restart %d; log %s:\n%s", c.Name, p.Err(), r.restarts, p.LogFile, p.Tail(20))
			r.mu.Unlock()
			r.event("container exited (%v), restarting", p.Err())
		}
		if p != nil && p.Alive() {
			r.event("pod template changed (image %s): stopping pid %d", c.Image, p.PID)
			p.Stop(10 * time.Second)
		}
		np, err := r.start(ctx, c, sa)
		if err != nil {
			r.setErr(err)
			r.event("start failed: %v", err)
			retryAt = time.Now().Add(backoff)
			backoff = min(2*backoff, 30*time.Second)
			continue
		}
		r.mu.Lock()
		r.proc, r.image, r.args = np, c.Image, slices.Clone(c.Args)
		r.mu.Unlock()
		r.event("running %s as pid %d", c.Image, np.PID)
		if crashed {
			retryAt = time.Now().Add(backoff)
			backoff = min(2*backoff, 30*time.Second)
		}
	}
}

func container(d *appsv1.Deployment) (corev1.Container, ServiceAccount, error) {
	spec := d.Spec.Template.Spec
	if len(spec.Containers) != 1 {
		return corev1.Container{}, ServiceAccount{}, fmt.Errorf("deployment %s/%s has %d containers; the runner runs exactly one", d.Namespace, d.Name, len(spec.Containers))
	}
	sa := spec.ServiceAccountName
	if sa == "" {
		sa = "default"
	}
	return spec.Containers[0], ServiceAccount{Namespace: d.Namespace, Name: sa}, nil
}

var anyInterface = regexp.MustCompile(`^(--[^=]+=)(0\.0\.0\.0)?:([0-9]+)$`)

func (r *DeploymentRunner) start(ctx context.Context, c corev1.Container, sa ServiceAccount) (*Process, error) {
	bin, err := r.extract(ctx, c.Image)
	if err != nil {
		return nil, err
	}
	var args []string
	for _, a := range append(slices.Clone(c.Command[min(1, len(c.Command)):]), c.Args...) {
		if m := anyInterface.FindStringSubmatch(a); m != nil {
			ports, err := localcluster.FreePorts(1)
			if err != nil {
				return nil, err
			}
			a = fmt.Sprintf("%s127.0.0.1:%d", m[1], ports[0])
		}
		args = append(args, a)
	}
	var env []string
	for _, e := range c.Env {
		if e.ValueFrom == nil {
			env = append(env, e.Name+"="+e.Value)
		}
	}
	p, err := StartProcess(ctx, r.cfg, ProcSpec{
		Name:           "container",
		Binary:         bin,
		Args:           args,
		Env:            env,
		Dir:            r.dir,
		ServiceAccount: sa,
	})
	if err != nil {
		return nil, err
	}
	return p, nil
}

// extract pulls image (for this machine's platform) and writes its
// entrypoint binary to <dir>/images/<digest>/, once per digest.
func (r *DeploymentRunner) extract(ctx context.Context, image string) (string, error) {
	ref, err := name.ParseReference(image, name.StrictValidation)
	if err != nil {
		return "", fmt.Errorf("image %q: %w", image, err)
	}
	if _, ok := ref.(name.Digest); !ok {
		return "", fmt.Errorf("image %q is not pinned by digest", image)
	}
	img, err := remote.Image(ref, r.transport, remote.WithContext(ctx), remote.WithPlatform(v1.Platform{OS: "linux", Architecture: runtime.GOARCH}))
	if err != nil {
		return "", fmt.Errorf("pulling %s: %w", image, err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return "", err
	}
	entry := append(slices.Clone(cfg.Config.Entrypoint), cfg.Config.Cmd...)
	if len(entry) == 0 {
		return "", fmt.Errorf("%s has no entrypoint", image)
	}
	digest := strings.TrimPrefix(ref.Identifier(), "sha256:")
	dst := filepath.Join(r.dir, "..", "..", "images", digest[:16], path.Base(entry[0]))
	if fi, err := os.Stat(dst); err == nil && fi.Mode().IsRegular() {
		return dst, nil
	}
	if err := os.MkdirAll(filepath.Dir(dst), 0o755); err != nil {
		return "", err
	}
	rc := mutate.Extract(img)
	defer rc.Close()
	want := strings.TrimPrefix(path.Clean(entry[0]), "/")
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return "", fmt.Errorf("%s: entrypoint %s not found in the image", image, entry[0])
		}
		if err != nil {
			return "", fmt.Errorf("reading %s: %w", image, err)
		}
		if strings.TrimPrefix(path.Clean(h.Name), "/") != want || h.Typeflag != tar.TypeReg {
			continue
		}
		tmp := dst + ".tmp"
		f, err := os.OpenFile(tmp, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
		if err != nil {
			return "", err
		}
		if _, err := io.Copy(f, tr); err != nil {
			f.Close()
			return "", err
		}
		if err := f.Close(); err != nil {
			return "", err
		}
		return dst, os.Rename(tmp, dst)
	}
}

// Supervisor runs a DeploymentRunner for every Deployment matching a label
// selector, in any namespace, as they appear (e.g. each major's operator
// that OLM installs).
type Supervisor struct {
	mu      sync.Mutex
	runners map[string]*DeploymentRunner
}

// Supervise starts a Supervisor for Deployments matching selector; it runs
// until ctx ends (stopping every process).
func (o *OLM) Supervise(ctx context.Context, selector string) *Supervisor {
	s := &Supervisor{runners: map[string]*DeploymentRunner{}}
	go func() {
		cs, err := kubernetes.NewForConfig(o.cfg)
		if err != nil {
			fmt.Fprintf(o.log, "supervisor: %v\n", err)
			return
		}
		tick := time.NewTicker(time.Second)
		defer tick.Stop()
		for {
			l, err := cs.AppsV1().Deployments(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err == nil {
				for _, d := range l.Items {
					key := d.Namespace + "/" + d.Name
					s.mu.Lock()
					if _, ok := s.runners[key]; !ok {
						s.runners[key] = o.RunDeployment(ctx, d.Namespace, d.Name)
					}
					s.mu.Unlock()
				}
			}
			select {
			case <-ctx.Done():
				for _, r := range s.Runners() {
					<-r.done
				}
				return
			case <-tick.C:
			}
		}
	}()
	return s
}

// Runners returns the runners started so far.
func (s *Supervisor) Runners() []*DeploymentRunner {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []*DeploymentRunner
	for _, r := range s.runners {
		out = append(out, r)
	}
	slices.SortFunc(out, func(a, b *DeploymentRunner) int { return strings.Compare(a.Namespace+a.Name, b.Namespace+b.Name) })
	return out
}
