package localcluster

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"

	"github.com/titanml/inference-stack-operator/internal/oci"
)

// ImageFile is one regular file of an image assembled by AssembleImage.
type ImageFile struct {
	Path string // absolute path in the image, e.g. "/pause"
	Mode int64  // e.g. 0o755
	Data []byte
}

// ImageSpec is what AssembleImage needs besides the files.
type ImageSpec struct {
	Entrypoint []string
	WorkingDir string
	// User, e.g. "65532:65532"; empty means root.
	User string
}

// AssembleImage packages files as a single-layer linux/<GOARCH> image with
// the project's own reproducible image code: fixed timestamps, root-owned
// entries, sorted paths. The real node's pause image and the images of
// OLM's controllers are built with it.
func AssembleImage(files []ImageFile, spec ImageSpec) (v1.Image, error) {
	entries := make([]oci.Entry, len(files))
	for i, f := range files {
		entries[i] = oci.File(strings.TrimPrefix(path.Clean(f.Path), "/"), f.Mode, f.Data)
	}
	epoch := time.Unix(0, 0)
	layer, err := oci.LayerCache{}.Layer(entries, epoch)
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	img, err := oci.Image(oci.Config{
		Platform:   v1.Platform{OS: "linux", Architecture: runtime.GOARCH},
		Created:    epoch,
		User:       spec.User,
		Entrypoint: spec.Entrypoint,
		WorkingDir: spec.WorkingDir,
	}, []oci.LayerSpec{{Layer: layer, CreatedBy: "e2e/harness/localcluster"}})
	if err != nil {
		return nil, fmt.Errorf("image: %w", err)
	}
	return img, nil
}

// buildBinary builds a static Go binary from pkg (an import path of this
// repository's module, built in its root) into workDir/name and returns its
// path.
func buildBinary(ctx context.Context, root, pkg, name, workDir string) (string, error) {
	bin := filepath.Join(workDir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	return bin, nil
}

// writeImageArchive writes img as a docker-archive tarball tagged ref, the
// format `ctr images import` reads.
func writeImageArchive(img v1.Image, ref, file string) error {
	tag, err := name.NewTag(ref, name.StrictValidation)
	if err != nil {
		return fmt.Errorf("image reference %q: %w", ref, err)
	}
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if err := tarball.Write(tag, img, f); err != nil {
		f.Close()
		return fmt.Errorf("writing image archive %s: %w", file, err)
	}
	return f.Close()
}
