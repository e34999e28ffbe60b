package scenario

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"time"
)

// SelectProvider decides whether the e2e on provider ("local" or "kind")
// runs, given INFERENCE_STACK_E2E_CLUSTER (setting), and says why:
//
//	local | kind   that provider only
//	both           both
//	auto or unset  kind when a Docker engine answers, else local
func SelectProvider(setting, provider string) (run bool, why string) {
	switch setting {
	case "local", "kind":
		if setting == provider {
			return true, "INFERENCE_STACK_E2E_CLUSTER=" + setting
		}
		return false, "INFERENCE_STACK_E2E_CLUSTER=" + setting + " selects the other provider"
	case "both":
		return true, "INFERENCE_STACK_E2E_CLUSTER=both"
	case "", "auto":
	default:
		return false, fmt.Sprintf("unknown INFERENCE_STACK_E2E_CLUSTER=%q (local, kind, both or auto)", setting)
	}
	err := DockerAvailable(context.Background())
	switch {
	case provider == "kind" && err == nil:
		return true, "a Docker engine answers"
	case provider == "kind":
		return false, "kind needs a Docker engine: " + err.Error() + " (set INFERENCE_STACK_E2E_CLUSTER=kind to insist)"
	case err == nil:
		return false, "a Docker engine answers, so the kind provider runs instead (INFERENCE_STACK_E2E_CLUSTER=local or both to run this one)"
	default:
		return true, "no Docker engine (" + err.Error() + "), so the local cluster"
	}
}

// DockerAvailable pings the Docker engine at DOCKER_HOST (unix:// or
// tcp://) or the default socket.
func DockerAvailable(ctx context.Context) error {
	host := os.Getenv("DOCKER_HOST")
	from := "DOCKER_HOST"
	if host == "" {
		host, from = "unix:///var/run/docker.sock", "the default socket; DOCKER_HOST is unset"
	}
	u, err := url.Parse(host)
	if err != nil {
		return fmt.Errorf("DOCKER_HOST %q: %w", host, err)
	}
	tr := &http.Transport{}
	base := "http://docker"
	switch u.Scheme {
	case "unix":
		if _, err := os.Stat(u.Path); errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("no Docker engine socket %s (%s)", u.Path, from)
		} else if err != nil {
			return fmt.Errorf("Docker engine socket %s (%s): %w", u.Path, from, err)
		}
		tr.DialContext = func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", u.Path)
		}
	case "tcp", "http":
		base = "http://" + u.Host
	default:
		return fmt.Errorf("DOCKER_HOST scheme %q not supported for the ping", u.Scheme)
	}
	ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/_ping", nil)
	if err != nil {
		return fmt.Errorf("asking Docker: %w", err)
	}
	resp, err := (&http.Client{Transport: tr}).Do(req)
	if err != nil {
		return fmt.Errorf("no Docker engine answers at %s (%s): %w", host, from, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("the Docker engine at %s (%s) answered /_ping with %s", host, from, resp.Status)
	}
	return nil
}
