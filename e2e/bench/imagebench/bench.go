// Package imagebench measures the image build the way a developer meets it: a
// cold `make images` in a clean clone, then a no-op rebuild, and the
// compressed size of every image.
package imagebench

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/titanml/inference-stack-operator/internal/build"
	"github.com/titanml/inference-stack-operator/internal/oci"
	"github.com/titanml/inference-stack-operator/internal/srctree"
)

// Options configure a benchmark.
type Options struct {
	Root string
	// ColdGoCache builds with an empty GOCACHE, so the cold build compiles
	// every dependency (as on a fresh machine with the modules downloaded).
	ColdGoCache bool
	// MakeArgs are extra `make` arguments (e.g. PLATFORMS=linux/amd64).
	MakeArgs []string
	Log      io.Writer
}

// Report holds the measurements.
type Report struct {
	GoCache      string
	Cold, NoOp   time.Duration
	Sizes        map[string][]oci.PlatformSize
	Refs         map[string]string
	NoOpSameRefs bool
	Cores        int
}

// Run copies the tree into a temporary clean clone, runs `make images`
// twice there and reads the sizes.
func Run(ctx context.Context, o Options) (*Report, error) {
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	tmp, err := os.MkdirTemp("", "isctl-bench-")
	if err != nil {
		return nil, fmt.Errorf("creating the benchmark's directory: %w", err)
	}
	defer os.RemoveAll(tmp)
	clone := filepath.Join(tmp, "src")
	if err := srctree.Copy(ctx, o.Root, clone); err != nil {
		return nil, fmt.Errorf("copying the source tree: %w", err)
	}
	env := os.Environ()
	rep := &Report{GoCache: "warm (the developer's GOCACHE)", Cores: runtime.NumCPU()}
	if o.ColdGoCache {
		env = append(env, "GOCACHE="+filepath.Join(tmp, "gocache"))
		rep.GoCache = "empty (every package compiled)"
	}
	makeArgs := []string{"images"}
	if _, err := os.Stat(filepath.Join(clone, "Makefile")); err != nil {
		makeArgs = []string{"-f", "tools/tools.mk", "images"}
	}
	makeArgs = append(makeArgs, o.MakeArgs...)
	runMake := func(what string) (time.Duration, error) {
		logf("%s: make %s (in a clean clone at %s)", what, strings.Join(makeArgs, " "), clone)
		cmd := exec.CommandContext(ctx, "make", makeArgs...)
		cmd.Dir = clone
		cmd.Env = env
		var out bytes.Buffer
		cmd.Stdout, cmd.Stderr = &out, &out
		start := time.Now()
		err := cmd.Run()
		d := time.Since(start)
		if err != nil {
			return d, fmt.Errorf("%s build failed: %w\n%s", what, err, out.String())
		}
		logf("%s: %s", what, d.Round(100*time.Millisecond))
		return d, nil
	}
	if rep.Cold, err = runMake("cold"); err != nil {
		return nil, err
	}
	first, err := build.ReadDigests(filepath.Join(clone, "out"))
	if err != nil {
		return nil, fmt.Errorf("the cold build's digests: %w", err)
	}
	if rep.NoOp, err = runMake("no-op"); err != nil {
		return nil, err
	}
	second, err := build.ReadDigests(filepath.Join(clone, "out"))
	if err != nil {
		return nil, fmt.Errorf("the no-op build's digests: %w", err)
	}
	rep.NoOpSameRefs = true
	rep.Sizes, rep.Refs = map[string][]oci.PlatformSize{}, map[string]string{}
	for _, n := range build.Names {
		rep.NoOpSameRefs = rep.NoOpSameRefs && first[n] == second[n]
		rep.Refs[n] = second[n].String()
		top, err := oci.ReadLayout(filepath.Join(clone, "out", "images", n))
		if err != nil {
			return nil, fmt.Errorf("reading the %s image: %w", n, err)
		}
		if rep.Sizes[n], err = top.Sizes(); err != nil {
			return nil, fmt.Errorf("sizing the %s image: %w", n, err)
		}
	}
	return rep, nil
}

// Markdown renders the report.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "# Image build benchmark\n\n")
	fmt.Fprintf(&b, "Clean clone, %d CPU(s), Go build cache: %s.\n\n", r.Cores, r.GoCache)
	fmt.Fprintf(&b, "| build | time |\n| --- | --- |\n")
	fmt.Fprintf(&b, "| cold `make images` | %s |\n", r.Cold.Round(100*time.Millisecond))
	ratio := 100 * r.NoOp.Seconds() / r.Cold.Seconds()
	goal := "meets the goal (< 10%)"
	if ratio >= 10 {
		goal = "misses the goal (< 10%)"
	}
	fmt.Fprintf(&b, "| no-op rebuild | %s (%.1f%% of cold: %s) |\n\n", r.NoOp.Round(100*time.Millisecond), ratio, goal)
	fmt.Fprintf(&b, "No-op rebuild produced the same digests: %v.\n\n", r.NoOpSameRefs)
	fmt.Fprintf(&b, "| image | platform | compressed size |\n| --- | --- | --- |\n")
	for _, n := range build.Names {
		for _, s := range r.Sizes[n] {
			note := ""
			if n == build.Operator {
				if s.Bytes < 40e6 {
					note = " (goal < 40 MB: met)"
				} else {
					note = " (goal < 40 MB: missed)"
				}
			}
			fmt.Fprintf(&b, "| %s | %s | %s%s |\n", n, s.Platform, HumanSize(s.Bytes), note)
		}
	}
	fmt.Fprintf(&b, "\n| image | reference |\n| --- | --- |\n")
	for _, n := range build.Names {
		fmt.Fprintf(&b, "| %s | `%s` |\n", n, r.Refs[n])
	}
	return b.String()
}

// HumanSize formats a byte count in MB, or kB below a megabyte.
func HumanSize(n int64) string {
	if n < 1e6 {
		return fmt.Sprintf("%.1f kB", float64(n)/1e3)
	}
	return fmt.Sprintf("%.2f MB", float64(n)/1e6)
}
