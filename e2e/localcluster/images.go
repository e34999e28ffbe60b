package localcluster

import (
	"archive/tar"
	"bytes"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"runtime"
	"sort"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
	"github.com/google/go-containerregistry/pkg/v1/types"
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
// reproducible contents (fixed timestamps, root-owned entries). The real
// node's pause image and the images of OLM's controllers are built with it.
//
// It is a variable so that the harness can use the project's own OCI image
// code instead once that is importable from e2e/; the default builds with
// go-containerregistry, which the repository already depends on.
var AssembleImage = func(files []ImageFile, spec ImageSpec) (v1.Image, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	sorted := append([]ImageFile(nil), files...)
	sort.Slice(sorted, func(i, j int) bool { return sorted[i].Path < sorted[j].Path })
	for _, f := range sorted {
		// Parent directories first, as a tar extractor expects.
		var parents []string
		for d := path.Dir(path.Clean(f.Path)); d != "/" && d != "." && !dirs[d]; d = path.Dir(d) {
			parents = append([]string{d}, parents...)
		}
		for _, d := range parents {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d[1:] + "/", Mode: 0o755, ModTime: epoch, Format: tar.FormatPAX}); err != nil {
				return nil, err
			}
		}
		hdr := &tar.Header{Typeflag: tar.TypeReg, Name: path.Clean(f.Path)[1:], Mode: f.Mode, Size: int64(len(f.Data)), ModTime: epoch, Format: tar.FormatPAX}
		if err := tw.WriteHeader(hdr); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.Data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	raw := buf.Bytes()
	layer, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) {
		return io.NopCloser(bytes.NewReader(raw)), nil
	}, tarball.WithMediaType(types.OCILayer))
	if err != nil {
		return nil, fmt.Errorf("image layer: %w", err)
	}
	base := mutate.MediaType(empty.Image, types.OCIManifestSchema1)
	base = mutate.ConfigMediaType(base, types.OCIConfigJSON)
	img, err := mutate.AppendLayers(base, layer)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.OS, cf.Architecture = "linux", runtime.GOARCH
	cf.Created = v1.Time{Time: epoch}
	cf.Config.Entrypoint = spec.Entrypoint
	cf.Config.WorkingDir = spec.WorkingDir
	cf.Config.User = spec.User
	return mutate.ConfigFile(img, cf)
}

// BinaryImage builds a static Go binary from pkg (an import path of this
// repository's module, built in its root) and packages it as an image whose
// entrypoint is /<name>.
func BinaryImage(ctx context.Context, root, pkg, name, user string, workDir string) (v1.Image, error) {
	bin := filepath.Join(workDir, name)
	cmd := exec.CommandContext(ctx, "go", "build", "-trimpath", "-ldflags=-s -w", "-o", bin, pkg)
	cmd.Dir = root
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0", "GOWORK=off", "GOOS=linux", "GOARCH="+runtime.GOARCH)
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("building %s: %w\n%s", pkg, err, out)
	}
	data, err := os.ReadFile(bin)
	if err != nil {
		return nil, err
	}
	return AssembleImage([]ImageFile{{Path: "/" + name, Mode: 0o755, Data: data}}, ImageSpec{Entrypoint: []string{"/" + name}, User: user})
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
