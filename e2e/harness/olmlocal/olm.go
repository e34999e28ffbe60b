package olmlocal

import (
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/titanml/inference-stack-operator/e2e/harness/localcluster"
	"github.com/titanml/inference-stack-operator/e2e/harness/poll"
)

// Options configure Start.
type Options struct {
	// Dir is the harness's work directory (created): certificates, the
	// controllers' directories, caches and logs. Every ancestor must be
	// traversable by NonRootID. Default: a new directory under os.TempDir(),
	// removed by Stop.
	Dir string
	// Log receives progress messages; nil discards them.
	Log io.Writer
	// RegistryLog receives the registry's request log; nil discards it.
	RegistryLog io.Writer
	// RegistryHost is the address the registry listens on: 127.0.0.1 by
	// default; a cluster with a real node needs one its containerd can
	// reach (localcluster.Cluster.NodeAddress).
	RegistryHost string
	// Pods runs catalogd and operator-controller as pods, from images
	// built from the pinned binaries and pushed to the registry, deployed
	// from the release manifest (needs a cluster whose pods really run: a
	// real node that trusts the registry). Otherwise they run as host
	// processes.
	Pods bool
	// Cluster, with Pods, is the local cluster whose real node runs the
	// pods: it checks operator-controller's path to catalogd's Service.
	Cluster *localcluster.Cluster
	// OnRegistry, if set, is called once the registry serves, before
	// anything pulls from it (e.g. localcluster.Cluster.TrustRegistry).
	OnRegistry func(addr string, caPEM []byte) error
}

// OLM is OLM v1 (catalogd and operator-controller at Version) running as
// host processes against a cluster, with a TLS registry on loopback.
type OLM struct {
	Dir      string
	ownDir   bool
	CA       *CA
	Registry *Registry
	// CADir holds only ca.crt (the harness CA), for --pull-cas-dir and
	// --catalogd-cas-dir (containers/image reads every *.crt there as a CA
	// and would take a *.key as a client key).
	CADir string
	// CAFile is CADir/ca.crt, e.g. for SSL_CERT_FILE of tools that push.
	CAFile string

	// Catalogd and OperatorController are the host processes (nil when OLM
	// runs as pods).
	Catalogd           *Process
	OperatorController *Process
	// Pods reports that OLM runs as pods.
	Pods bool
	// Ports of the controllers' listeners (all on 127.0.0.1 except
	// catalogd's webhook server, which binds every interface: catalogd has
	// no flag for its host).
	CatalogServerPort, WebhookPort int

	cfg     *rest.Config
	log     io.Writer
	cluster *localcluster.Cluster

	aliveMu  sync.Mutex
	aliveAt  time.Time
	aliveErr error
}

// Start applies OLM's API objects from the pinned release manifest, starts
// a registry, then catalogd and operator-controller as host processes (each
// with its own service-account token and release RBAC, in a private mount
// namespace, as uid 65532), registers catalogd's webhook, and waits until
// both controllers are ready. Builds the binaries first if needed. On error
// nothing is left running.
func Start(ctx context.Context, cfg *rest.Config, opts Options) (_ *OLM, err error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if !opts.Pods {
		if err := CheckHostProcessSupport(); err != nil {
			return nil, err
		}
	}
	bins, err := EnsureBinaries(ctx, opts.Log)
	if err != nil {
		return nil, err
	}
	begin := time.Now()
	o := &OLM{Dir: opts.Dir, cfg: cfg, log: opts.Log, Pods: opts.Pods, cluster: opts.Cluster}
	if err := o.makeDir(); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			logs := o.tails(40)
			o.Stop(context.WithoutCancel(ctx))
			err = fmt.Errorf("%w\n%s", err, logs)
		}
	}()

	certDir, err := o.writeCerts()
	if err != nil {
		return nil, err
	}
	if err := o.startRegistry(opts); err != nil {
		return nil, err
	}
	m, dyn, err := o.applyAPI(ctx, bins.ModuleDir)
	if err != nil {
		return nil, err
	}
	if opts.Pods {
		if err := o.startPods(ctx, m, bins); err != nil {
			return nil, err
		}
		fmt.Fprintf(o.log, "OLM %s ready as pods in %s (catalogd, operator-controller from the release manifest)\n", Version, time.Since(begin).Round(10*time.Millisecond))
		return o, nil
	}
	if err := o.startProcesses(ctx, bins, certDir); err != nil {
		return nil, err
	}
	if err := o.registerWebhook(ctx, dyn, m.Webhook); err != nil {
		return nil, err
	}
	fmt.Fprintf(o.log, "OLM %s ready in %s: catalogd pid %d, operator-controller pid %d (logs in %s)\n",
		Version, time.Since(begin).Round(10*time.Millisecond), o.Catalogd.PID, o.OperatorController.PID, o.Dir)
	return o, nil
}

// makeDir creates the work directory (a temporary one Stop removes when
// Options.Dir is empty), absolute and traversable by NonRootID.
func (o *OLM) makeDir() error {
	var err error
	if o.Dir == "" {
		if o.Dir, err = os.MkdirTemp("", "olmlocal-"); err != nil {
			return err
		}
		o.ownDir = true
	}
	if o.Dir, err = filepath.Abs(o.Dir); err != nil {
		return err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return err
	}
	return os.Chmod(o.Dir, 0o755)
}

// writeCerts creates the harness CA and one serving certificate for every
// listener; it writes the CA to CAFile and the serving pair, readable by
// NonRootID only for the key, to the returned directory.
func (o *OLM) writeCerts() (certDir string, err error) {
	if o.CA, err = NewCA(); err != nil {
		return "", err
	}
	o.CADir = filepath.Join(o.Dir, "ca")
	o.CAFile = filepath.Join(o.CADir, "ca.crt")
	certDir = filepath.Join(o.Dir, "tls")
	for _, d := range []string{o.CADir, certDir} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	certPEM, keyPEM, err := o.CA.Serving("localhost", "127.0.0.1")
	if err != nil {
		return "", err
	}
	for path, data := range map[string][]byte{o.CAFile: o.CA.CertPEM, filepath.Join(certDir, "tls.crt"): certPEM, filepath.Join(certDir, "tls.key"): keyPEM} {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return "", err
		}
	}
	if err := chownTree(certDir, NonRootID); err != nil {
		return "", err
	}
	if err := os.Chmod(filepath.Join(certDir, "tls.key"), 0o600); err != nil {
		return "", err
	}
	return certDir, nil
}

// startRegistry starts the TLS registry and hands its address and CA to
// opts.OnRegistry before anything pulls from it.
func (o *OLM) startRegistry(opts Options) (err error) {
	if o.Registry, err = StartRegistry(o.CA, opts.RegistryHost, opts.RegistryLog); err != nil {
		return err
	}
	fmt.Fprintf(o.log, "registry on https://%s (CA %s)\n", o.Registry.Addr, o.CAFile)
	if opts.OnRegistry != nil {
		if err := opts.OnRegistry(o.Registry.Addr, o.CA.CertPEM); err != nil {
			return err
		}
	}
	return nil
}

// applyAPI applies OLM's API and identities from the release manifest in
// moduleDir and waits until the API server serves the CRDs.
func (o *OLM) applyAPI(ctx context.Context, moduleDir string) (*Manifests, dynamic.Interface, error) {
	m, err := LoadManifests(moduleDir)
	if err != nil {
		return nil, nil, err
	}
	dyn, err := dynamic.NewForConfig(o.cfg)
	if err != nil {
		return nil, nil, err
	}
	if err := apply(ctx, dyn, m.Applied); err != nil {
		return nil, nil, err
	}
	if err := WaitEstablished(ctx, dyn, m.CRDs()); err != nil {
		return nil, nil, err
	}
	if err := WaitServed(ctx, o.cfg, "olm.operatorframework.io/v1", "clustercatalogs", "clusterextensions"); err != nil {
		return nil, nil, err
	}
	fmt.Fprintf(o.log, "applied OLM %s API objects (%d; skipped %v)\n", Version, len(m.Applied), m.Skipped)
	return m, dyn, nil
}

// startProcesses starts catalogd and operator-controller as host processes
// serving with the certificate in certDir and waits until both are ready.
func (o *OLM) startProcesses(ctx context.Context, bins *Binaries, certDir string) error {
	ports, err := localcluster.FreePorts(6)
	if err != nil {
		return err
	}
	o.CatalogServerPort, o.WebhookPort = ports[0], ports[1]
	catProbe, ocProbe := ports[2], ports[3]
	tlsCert, tlsKey := filepath.Join(certDir, "tls.crt"), filepath.Join(certDir, "tls.key")

	catDir := filepath.Join(o.Dir, "catalogd")
	o.Catalogd, err = StartProcess(ctx, o.cfg, ProcSpec{
		Name:   "catalogd",
		Binary: bins.Catalogd,
		Dir:    catDir,
		Args: []string{
			"--system-namespace=" + SystemNamespace,
			"--leader-elect=false",
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", catProbe),
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[4]),
			fmt.Sprintf("--catalogs-server-addr=127.0.0.1:%d", o.CatalogServerPort),
			fmt.Sprintf("--external-address=localhost:%d", o.CatalogServerPort),
			fmt.Sprintf("--webhook-server-port=%d", o.WebhookPort),
			"--cache-dir=" + filepath.Join(catDir, "cache"),
			"--tls-cert=" + tlsCert,
			"--tls-key=" + tlsKey,
			"--pull-cas-dir=" + o.CADir,
		},
		ServiceAccount: ServiceAccount{SystemNamespace, CatalogdServiceAccount},
	})
	if err != nil {
		return err
	}
	ocDir := filepath.Join(o.Dir, "operator-controller")
	o.OperatorController, err = StartProcess(ctx, o.cfg, ProcSpec{
		Name:   "operator-controller",
		Binary: bins.OperatorController,
		Dir:    ocDir,
		Args: []string{
			"--system-namespace=" + SystemNamespace,
			"--leader-elect=false",
			fmt.Sprintf("--health-probe-bind-address=127.0.0.1:%d", ocProbe),
			fmt.Sprintf("--metrics-bind-address=127.0.0.1:%d", ports[5]),
			"--cache-path=" + filepath.Join(ocDir, "cache"),
			"--tls-cert=" + tlsCert,
			"--tls-key=" + tlsKey,
			"--catalogd-cas-dir=" + o.CADir,
			"--pull-cas-dir=" + o.CADir,
		},
		ServiceAccount: ServiceAccount{SystemNamespace, OperatorControllerServiceAccount},
	})
	if err != nil {
		return err
	}
	for _, w := range []struct {
		p    *Process
		port int
	}{{o.Catalogd, catProbe}, {o.OperatorController, ocProbe}} {
		if err := waitReady(ctx, w.p, w.port); err != nil {
			return err
		}
	}
	return nil
}

// waitReady polls the process's /readyz.
func waitReady(ctx context.Context, p *Process, port int) error {
	url := fmt.Sprintf("http://127.0.0.1:%d/readyz", port)
	client := &http.Client{Timeout: 2 * time.Second}
	alive := func() error {
		if !p.Alive() {
			return fmt.Errorf("%s exited while starting (%v)", p.Name, p.Err())
		}
		return nil
	}
	err := poll.Until(ctx, time.Minute, p.Name+" to be ready at "+url, func(context.Context) (bool, string, error) {
		resp, err := client.Get(url)
		if err != nil {
			return false, err.Error(), nil
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK, resp.Status, nil
	}, poll.While(alive))
	if err != nil {
		return fmt.Errorf("%w; log %s:\n%s", err, p.LogFile, p.Tail(40))
	}
	return nil
}

// registerWebhook re-creates catalogd's mutating webhook configuration
// pointing at the host process. (The catalog chart sets the label the
// webhook adds itself, so it is only exercised for catalogs that lack it.)
func (o *OLM) registerWebhook(ctx context.Context, dyn dynamic.Interface, wh *unstructured.Unstructured) error {
	wh = wh.DeepCopy()
	delete(wh.Object, "status")
	ann := wh.GetAnnotations()
	delete(ann, "cert-manager.io/inject-ca-from-secret")
	wh.SetAnnotations(ann)
	hooks, _, _ := unstructured.NestedSlice(wh.Object, "webhooks")
	for i, h := range hooks {
		m := h.(map[string]any)
		path, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
		m["clientConfig"] = map[string]any{
			"url":      fmt.Sprintf("https://127.0.0.1:%d%s", o.WebhookPort, path),
			"caBundle": base64.StdEncoding.EncodeToString(o.CA.CertPEM),
		}
		hooks[i] = m
	}
	if err := unstructured.SetNestedSlice(wh.Object, hooks, "webhooks"); err != nil {
		return err
	}
	data, err := wh.MarshalJSON()
	if err != nil {
		return err
	}
	force := true
	_, err = dyn.Resource(webhookGVR).Patch(ctx, wh.GetName(), "application/apply-patch+yaml", data, metav1.PatchOptions{FieldManager: fieldManager, Force: &force})
	if err != nil {
		return fmt.Errorf("registering catalogd's webhook: %w", err)
	}
	// The API server calls it at once; make sure it answers over TLS.
	conn, err := tls.Dial("tcp", fmt.Sprintf("127.0.0.1:%d", o.WebhookPort), &tls.Config{RootCAs: o.CA.Pool(), ServerName: "127.0.0.1"})
	if err != nil {
		return fmt.Errorf("catalogd's webhook server: %w", err)
	}
	return conn.Close()
}

// Alive fails if a controller has exited (host processes) or has no Ready
// pod (pods).
func (o *OLM) Alive() error {
	if o.Pods {
		// Callers poll this between their own checks: ask the API
		// server at most every two seconds.
		o.aliveMu.Lock()
		defer o.aliveMu.Unlock()
		if time.Since(o.aliveAt) > 2*time.Second {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			o.aliveErr = o.podsAlive(ctx)
			cancel()
			o.aliveAt = time.Now()
		}
		return o.aliveErr
	}
	var dead []string
	for _, p := range []*Process{o.Catalogd, o.OperatorController} {
		if p != nil && !p.Alive() {
			dead = append(dead, fmt.Sprintf("%s (%v)", p.Name, p.Err()))
		}
	}
	if len(dead) > 0 {
		return fmt.Errorf("OLM controller(s) exited: %s", strings.Join(dead, ", "))
	}
	return nil
}

// DumpLogs writes the last lines of both controllers' logs to w.
func (o *OLM) DumpLogs(w io.Writer, lines int) {
	io.WriteString(w, o.tails(lines))
}

func (o *OLM) tails(lines int) string {
	if o.Pods {
		return o.podLogs(context.Background(), lines)
	}
	var b strings.Builder
	for _, p := range []*Process{o.Catalogd, o.OperatorController} {
		if p != nil {
			fmt.Fprintf(&b, "==== %s (last %d lines of %s) ====\n%s\n", p.Name, lines, p.LogFile, p.Tail(lines))
		}
	}
	return b.String()
}

// Stop stops the controllers and the registry and removes the webhook
// configuration (a webhook pointing at nothing would block ClusterCatalog
// writes), and the work dir if Start created it.
func (o *OLM) Stop(ctx context.Context) error {
	var errs []error
	if dyn, err := dynamic.NewForConfig(o.cfg); err == nil {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		err := dyn.Resource(webhookGVR).Delete(ctx, "catalogd-mutating-webhook-configuration", metav1.DeleteOptions{})
		cancel()
		if err != nil && !apierrors.IsNotFound(err) && !isUnreachable(err) {
			errs = append(errs, err)
		}
	}
	for _, p := range []*Process{o.OperatorController, o.Catalogd} {
		if p != nil {
			p.Stop(10 * time.Second)
		}
	}
	if o.Registry != nil {
		ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		if err := o.Registry.Stop(ctx); err != nil {
			errs = append(errs, err)
		}
		cancel()
	}
	if o.ownDir {
		if err := os.RemoveAll(o.Dir); err != nil {
			errs = append(errs, err)
		}
	}
	return errors.Join(errs...)
}

func isUnreachable(err error) bool {
	var opErr *net.OpError
	return errors.As(err, &opErr) || strings.Contains(err.Error(), "connection refused")
}
