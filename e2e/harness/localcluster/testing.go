package localcluster

import (
	"context"
	"io"
	"os"
	"testing"
	"time"
)

// StartForTest starts a cluster for t and registers its cleanup: component
// logs are written to the test log if t failed, then the cluster is
// stopped and waited for. Progress goes to the test log unless opts.Log is
// set. It calls t.Fatal if the cluster cannot start.
//
// The first run on a machine builds the binaries (~6 min on 2 cores); give
// `go test` a -timeout that allows for it, or run
// `go run ./e2e/cmd/localcluster build` beforehand.
func StartForTest(t testing.TB, opts Options) *Cluster {
	t.Helper()
	if opts.Log == nil {
		opts.Log = t.Output()
	}
	ctx := context.Background()
	if d, ok := t.(interface{ Deadline() (time.Time, bool) }); ok {
		if deadline, ok := d.Deadline(); ok {
			var cancel context.CancelFunc
			ctx, cancel = context.WithDeadline(ctx, deadline)
			defer cancel()
		}
	}
	c, err := Start(ctx, opts)
	if err != nil {
		t.Fatalf("starting local cluster: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			c.DumpLogs(t.Output(), 60)
		}
		// t.Context() is already cancelled during cleanup.
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		if err := c.Stop(ctx); err != nil {
			t.Errorf("stopping local cluster: %v", err)
		}
	})
	return c
}

// FindInputs finds everything a cluster of this package may need: the
// control plane's binaries, and the real node's binaries and pause program
// (used on machines that can run a real node). Outside Bazel it builds what
// the cache lacks. The e2e tests call it from TestBazelInputs, which runs
// under `bazel test` and under tools/bazelcheck's dry run, to prove that
// their BUILD files give them these inputs as runfiles.
func FindInputs(ctx context.Context, log io.Writer) error {
	if _, err := EnsureBinaries(ctx, log); err != nil {
		return err
	}
	if _, _, err := EnsureNodeBinaries(ctx, log); err != nil {
		return err
	}
	work, err := os.MkdirTemp("", "localcluster-inputs-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(work)
	_, err = pauseBinary(ctx, work)
	return err
}
