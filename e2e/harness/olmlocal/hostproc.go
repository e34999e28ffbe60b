package olmlocal

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// NonRootID is the uid and gid the host processes run as: the user of
// OLM's images and of the operator image.
const NonRootID = 65532

// ServiceAccount names the identity a host process runs with.
type ServiceAccount struct {
	Namespace, Name string
}

func (s ServiceAccount) String() string { return s.Namespace + "/" + s.Name }

// ProcSpec describes a host process started by StartProcess.
type ProcSpec struct {
	// Name of the process, for logs and messages.
	Name string
	// Binary to run. It is hard-linked (or copied) into Dir, so that the
	// unprivileged user can execute it wherever it was built.
	Binary string
	Args   []string
	// Env is added to a clean environment holding PATH, HOME, TMPDIR and
	// KUBECONFIG.
	Env []string
	// Dir is the process's own directory (created): its kubeconfig, its
	// /run overlay, home, temp dir, log, and any caches the caller puts
	// there. Every ancestor must be traversable by NonRootID.
	Dir string
	// ServiceAccount the process authenticates as, like a pod would:
	// the kubeconfig carries a token of it, and
	// /var/run/secrets/kubernetes.io/serviceaccount/{token,ca.crt,namespace}
	// exist for it inside its private mount namespace.
	ServiceAccount ServiceAccount
	// TokenTTL of the minted token; default 7 days.
	TokenTTL time.Duration
}

// Process is a running host process.
type Process struct {
	Name    string
	PID     int
	LogFile string
	Dir     string
	cmd     *exec.Cmd
	done    chan struct{}
	mu      sync.Mutex
	err     error
}

// Alive reports whether the process is still running.
func (p *Process) Alive() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// Err returns how the process ended (nil while it runs or if it exited 0).
func (p *Process) Err() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.err
}

// Stop sends SIGTERM, waits up to grace, then kills; a no-op if the process
// is already gone.
func (p *Process) Stop(grace time.Duration) {
	if !p.Alive() {
		return
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.done:
	case <-time.After(grace):
		_ = p.cmd.Process.Kill()
		<-p.done
	}
}

// Tail returns the last n lines of the process's log (all if n <= 0).
func (p *Process) Tail(n int) string {
	return tailFile(p.LogFile, n)
}

func tailFile(path string, n int) string {
	data, err := os.ReadFile(path)
	if err != nil {
		return fmt.Sprintf("(no log: %v)", err)
	}
	lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if n > 0 && len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// secretsMountPoint is where /var/run really is (a symlink to /run on most
// systems): the process's private /run is mounted there.
func secretsMountPoint() string {
	if p, err := filepath.EvalSymlinks("/var/run"); err == nil {
		return p
	}
	return "/var/run"
}

// launcher runs inside `unshare --mount --propagation private`: it covers
// /run (or /var/run) with the process's own directory — mounted with -n so
// that nothing is written to the host's /run/mount/utab — or, if binding is
// not possible, with a private tmpfs holding a copy; then drops to the
// unprivileged user (killed if the harness dies) and execs the program.
// Nothing is visible outside the namespace.
const launcher = `set -e
run="$1"; target="$2"; shift 2
if ! mount -n --bind "$run" "$target" 2>/dev/null; then
  mount -n -t tmpfs -o mode=0755 tmpfs "$target"
  cp -a "$run/." "$target/"
fi
exec setpriv --reuid=65532 --regid=65532 --clear-groups --pdeathsig=KILL -- "$@"
`

// CheckHostProcessSupport says why host processes cannot be started here,
// or returns nil: they need root (for the mount namespace and the uid
// switch) and util-linux's unshare and setpriv.
func CheckHostProcessSupport() error {
	if os.Geteuid() != 0 {
		return errors.New("starting OLM's controllers as host processes needs root (a private mount namespace provides their service-account token path)")
	}
	for _, tool := range []string{"unshare", "setpriv", "mount", "sh"} {
		if _, err := exec.LookPath(tool); err != nil {
			return fmt.Errorf("starting host processes needs %s (util-linux): %w", tool, err)
		}
	}
	return nil
}

// StartProcess mints a token for spec.ServiceAccount, prepares spec.Dir and
// starts the program as NonRootID in a private mount namespace. Output goes
// to <Dir>/<Name>.log.
func StartProcess(ctx context.Context, cfg *rest.Config, spec ProcSpec) (*Process, error) {
	if err := CheckHostProcessSupport(); err != nil {
		return nil, err
	}
	if spec.TokenTTL == 0 {
		spec.TokenTTL = 7 * 24 * time.Hour
	}
	if err := checkTraversable(spec.Dir); err != nil {
		return nil, err
	}
	token, err := mintToken(ctx, cfg, spec)
	if err != nil {
		return nil, err
	}
	caData, err := clusterCA(cfg)
	if err != nil {
		return nil, err
	}
	kubeconfig, err := writeIdentity(spec, cfg.Host, token, caData)
	if err != nil {
		return nil, err
	}
	bin := filepath.Join(spec.Dir, "bin", filepath.Base(spec.Binary))
	if err := linkOrCopy(spec.Binary, bin); err != nil {
		return nil, fmt.Errorf("%s: %w", spec.Name, err)
	}
	if err := chownTree(spec.Dir, NonRootID); err != nil {
		return nil, err
	}

	logPath := filepath.Join(spec.Dir, spec.Name+".log")
	logf, err := os.OpenFile(logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close()
	fmt.Fprintf(logf, "---- %s starting as %s (uid %d): %s %s\n", time.Now().Format(time.RFC3339), spec.ServiceAccount, NonRootID, bin, strings.Join(spec.Args, " "))

	cmd := launchCommand(spec, bin, kubeconfig)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", spec.Name, err)
	}
	p := &Process{Name: spec.Name, PID: cmd.Process.Pid, LogFile: logPath, Dir: spec.Dir, cmd: cmd, done: make(chan struct{})}
	go func() {
		err := cmd.Wait()
		p.mu.Lock()
		p.err = err
		p.mu.Unlock()
		close(p.done)
	}()
	return p, nil
}

// mintToken returns a token of spec.ServiceAccount valid for spec.TokenTTL.
func mintToken(ctx context.Context, cfg *rest.Config, spec ProcSpec) (string, error) {
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return "", err
	}
	secs := int64(spec.TokenTTL.Seconds())
	tr, err := cs.CoreV1().ServiceAccounts(spec.ServiceAccount.Namespace).CreateToken(ctx, spec.ServiceAccount.Name,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("%s: minting a token for service account %s: %w", spec.Name, spec.ServiceAccount, err)
	}
	return tr.Status.Token, nil
}

// writeIdentity lays out spec.Dir (home, tmp, bin) with the service
// account's files a pod would have, under run/, and a kubeconfig that
// authenticates with token to the API server at host; it returns the
// kubeconfig's path.
func writeIdentity(spec ProcSpec, host, token string, caData []byte) (string, error) {
	saDir := filepath.Join(spec.Dir, "run", "secrets", "kubernetes.io", "serviceaccount")
	for _, d := range []string{saDir, filepath.Join(spec.Dir, "home"), filepath.Join(spec.Dir, "tmp"), filepath.Join(spec.Dir, "bin")} {
		if err := os.MkdirAll(d, 0o755); err != nil {
			return "", err
		}
	}
	files := map[string][]byte{
		filepath.Join(saDir, "token"):     []byte(token),
		filepath.Join(saDir, "ca.crt"):    caData,
		filepath.Join(saDir, "namespace"): []byte(spec.ServiceAccount.Namespace),
	}
	for path, data := range files {
		if err := os.WriteFile(path, data, 0o644); err != nil {
			return "", err
		}
	}
	kubeconfig := filepath.Join(spec.Dir, "kubeconfig")
	kc := clientcmdapi.NewConfig()
	kc.Clusters["cluster"] = &clientcmdapi.Cluster{Server: host, CertificateAuthorityData: caData}
	kc.AuthInfos["sa"] = &clientcmdapi.AuthInfo{Token: token}
	kc.Contexts["sa"] = &clientcmdapi.Context{Cluster: "cluster", AuthInfo: "sa", Namespace: spec.ServiceAccount.Namespace}
	kc.CurrentContext = "sa"
	if err := clientcmd.WriteToFile(*kc, kubeconfig); err != nil {
		return "", err
	}
	return kubeconfig, nil
}

// launchCommand is the command that runs bin through launcher in a
// private mount namespace, with a clean environment.
func launchCommand(spec ProcSpec, bin, kubeconfig string) *exec.Cmd {
	args := append([]string{"--mount", "--propagation", "private", "--", "sh", "-c", launcher, "sh",
		filepath.Join(spec.Dir, "run"), secretsMountPoint(), bin}, spec.Args...)
	cmd := exec.Command("unshare", args...)
	cmd.Dir = spec.Dir
	cmd.Env = append([]string{
		"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
		"HOME=" + filepath.Join(spec.Dir, "home"),
		"TMPDIR=" + filepath.Join(spec.Dir, "tmp"),
		"KUBECONFIG=" + kubeconfig,
	}, spec.Env...)
	// Killed with the harness until setpriv takes over (it sets its own
	// parent-death signal after switching users).
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	return cmd
}

// clusterCA returns the API server's CA bundle from cfg.
func clusterCA(cfg *rest.Config) ([]byte, error) {
	if len(cfg.CAData) > 0 {
		return cfg.CAData, nil
	}
	if cfg.CAFile != "" {
		return os.ReadFile(cfg.CAFile)
	}
	return nil, errors.New("the cluster's client configuration has no CA")
}

func linkOrCopy(src, dst string) error {
	_ = os.Remove(dst)
	if err := os.Link(src, dst); err == nil {
		return os.Chmod(dst, 0o755)
	}
	in, err := os.Open(src)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY|os.O_TRUNC, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}

func chownTree(dir string, id int) error {
	return filepath.Walk(dir, func(path string, info os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		// A hard-linked binary belongs to the cache as well; its mode is
		// enough (0755).
		if info.Mode().IsRegular() && filepath.Base(filepath.Dir(path)) == "bin" {
			return nil
		}
		return os.Lchown(path, id, id)
	})
}

// checkTraversable fails if NonRootID cannot reach dir: every existing
// ancestor must be executable by others.
func checkTraversable(dir string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	for p := filepath.Dir(abs); ; p = filepath.Dir(p) {
		if fi, err := os.Stat(p); err == nil && fi.Mode().Perm()&0o001 == 0 {
			return fmt.Errorf("%s is not reachable by uid %d: %s has mode %v (use a work directory outside it, e.g. under %s)", abs, NonRootID, p, fi.Mode().Perm(), os.TempDir())
		}
		if p == filepath.Dir(p) {
			return nil
		}
	}
}
