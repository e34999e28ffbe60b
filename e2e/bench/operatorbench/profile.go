package operatorbench

import (
	"context"
	"fmt"
	"io"
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
	body, err := get(ctx, url)
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
	b.logf("%s: CPU profile of the burst's first %s in %s", name, b.o.Profile, path)
	return nil
}
