package operatorbench

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"time"
)

// profile starts a CPU profile of o's next b.o.Profile, if o is profiled,
// and returns a function that waits for it and writes it to
// b.o.ProfileDir as <o's name>.cpu.pprof.
func (b *bench) profile(ctx context.Context, o operatorUnderTest) (wait func() error) {
	if o.pprof == "" {
		return func() error { return nil }
	}
	seconds := int((b.o.Profile + time.Second - 1) / time.Second)
	done := make(chan error, 1)
	go func() {
		done <- b.writeProfile(ctx, fmt.Sprintf("%s/profile?seconds=%d", o.pprof, seconds), o.Name())
	}()
	return func() error { return <-done }
}

func (b *bench) writeProfile(ctx context.Context, url, name string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return fmt.Errorf("profiling %s: %w", name, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("profiling %s: %s", name, resp.Status)
	}
	if err := os.MkdirAll(b.o.ProfileDir, 0o755); err != nil {
		return err
	}
	path := filepath.Join(b.o.ProfileDir, name+".cpu.pprof")
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, resp.Body); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", path, err)
	}
	if err := f.Close(); err != nil {
		return err
	}
	b.logf("%s: CPU profile of the burst's first %s in %s", name, b.o.Profile, path)
	return nil
}
