package operatorbench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"k8s.io/client-go/rest"
)

// profile starts CPU profiles of the next b.o.Profile, if profiles are
// asked for: of o (if it serves pprof) and of the cluster's API server,
// where most of a burst's CPU goes. It returns a function that waits for
// them and writes them to b.o.ProfileDir as <name>.cpu.pprof and
// <name>.apiserver.cpu.pprof.
func (b *bench) profile(ctx context.Context, name string, o *operatorUnderTest, c *clusterUnderTest) (wait func() error) {
	if b.o.Profile <= 0 {
		return func() error { return nil }
	}
	query := fmt.Sprintf("/profile?seconds=%d", int((b.o.Profile+time.Second-1)/time.Second))
	var done []chan error
	start := func(fetch func() (io.ReadCloser, error), file string) {
		ch := make(chan error, 1)
		done = append(done, ch)
		go func() { ch <- b.writeProfile(fetch, file) }()
	}
	if o != nil && o.pprof != "" {
		start(func() (io.ReadCloser, error) { return get(ctx, o.pprof+query) }, name)
	}
	start(func() (io.ReadCloser, error) { return apiServerGet(ctx, c.RESTConfig(), "/debug/pprof"+query) }, name+".apiserver")
	return func() error {
		var errs []error
		for _, ch := range done {
			errs = append(errs, <-ch)
		}
		return errors.Join(errs...)
	}
}

// apiServerGet GETs path from the API server as the cluster's admin (the
// kube-apiserver serves pprof to whoever may GET it, --profiling being
// its default).
func apiServerGet(ctx context.Context, cfg *rest.Config, path string) (io.ReadCloser, error) {
	if cfg == nil {
		return nil, fmt.Errorf("GET %s: the cluster has no kubeconfig", path)
	}
	cfg.Timeout = 0 // a profile takes as long as it was asked to
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return nil, err
	}
	return getWith(ctx, hc, cfg.Host+path)
}

func (b *bench) writeProfile(fetch func() (io.ReadCloser, error), name string) error {
	body, err := fetch()
	if err != nil {
		return fmt.Errorf("profiling %s: %w", name, err)
	}
	defer body.Close()
	if err := os.MkdirAll(b.o.ProfileDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(b.o.ProfileDir, name+".cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	b.logf("%s: CPU profile of the first %s in %s", name, b.o.Profile, path)
	return nil
}
