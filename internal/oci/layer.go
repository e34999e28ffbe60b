// Package oci assembles OCI images from scratch, reproducibly: tar
// layers with sorted entries, fixed owners, modes and modification times,
// deterministic gzip, fixed image configuration, and OCI image layouts on
// disk. Nothing here reads the clock, the user or absolute paths.
package oci

import (
	"archive/tar"
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"time"

	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/types"
)

// Entry is one directory or regular file of a layer.
type Entry struct {
	// Path is slash-separated and relative to the image root ("etc/passwd").
	Path string
	Dir  bool
	// Mode holds the permission bits (and sticky bit) only.
	Mode     int64
	UID, GID int
	// Data is the content of a regular file; Source, if set, names a file on
	// disk whose content is used instead.
	Data   []byte
	Source string
}

// File returns a regular-file entry owned by root.
func File(p string, mode int64, data []byte) Entry {
	return Entry{Path: p, Mode: mode, Data: data}
}

// Dir returns a directory entry.
func Dir(p string, mode int64, uid, gid int) Entry {
	return Entry{Path: p, Dir: true, Mode: mode, UID: uid, GID: gid}
}

// gzipLevel is part of the output: changing it changes every layer digest.
const gzipLevel = gzip.BestCompression

// Tar writes entries as a tar stream: entries sorted by path, missing parent
// directories added (0755, root), every modification time set to mtime, no
// user or group names, no access or change times.
func Tar(w io.Writer, entries []Entry, mtime time.Time) error {
	all, err := normalize(entries)
	if err != nil {
		return err
	}
	tw := tar.NewWriter(w)
	mtime = mtime.UTC().Truncate(time.Second)
	for _, e := range all {
		h := &tar.Header{
			Name:    e.Path,
			Mode:    e.Mode,
			Uid:     e.UID,
			Gid:     e.GID,
			ModTime: mtime,
			Format:  tar.FormatPAX,
		}
		if e.Dir {
			h.Typeflag = tar.TypeDir
			h.Name += "/"
			if err := tw.WriteHeader(h); err != nil {
				return err
			}
			continue
		}
		data := e.Data
		if e.Source != "" {
			if data, err = os.ReadFile(e.Source); err != nil {
				return fmt.Errorf("reading the layer file: %w", err)
			}
		}
		h.Typeflag = tar.TypeReg
		h.Size = int64(len(data))
		if err := tw.WriteHeader(h); err != nil {
			return err
		}
		if _, err := tw.Write(data); err != nil {
			return err
		}
	}
	return tw.Close()
}

func normalize(entries []Entry) ([]Entry, error) {
	byPath := map[string]Entry{}
	for _, e := range entries {
		p := path.Clean(strings.TrimPrefix(e.Path, "/"))
		if p == "." || p == "" || strings.HasPrefix(p, "../") || p == ".." {
			return nil, fmt.Errorf("layer entry %q: not a path inside the image", e.Path)
		}
		if e.Mode&^0o7777 != 0 {
			return nil, fmt.Errorf("layer entry %q: mode %o has bits other than permissions", e.Path, e.Mode)
		}
		if _, dup := byPath[p]; dup {
			return nil, fmt.Errorf("layer entry %q: listed twice", p)
		}
		e.Path = p
		byPath[p] = e
	}
	for p := range byPath {
		for d := path.Dir(p); d != "."; d = path.Dir(d) {
			if prev, ok := byPath[d]; ok {
				if !prev.Dir {
					return nil, fmt.Errorf("layer entry %q: parent %q is a file", p, d)
				}
				continue
			}
			byPath[d] = Entry{Path: d, Dir: true, Mode: 0o755}
		}
	}
	out := make([]Entry, 0, len(byPath))
	for _, e := range byPath {
		out = append(out, e)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Path < out[j].Path })
	return out, nil
}

// LayerCache keeps compressed layers keyed by the digest of their
// uncompressed content, so that an unchanged layer is never compressed twice.
// The zero value (empty Dir) caches nothing.
type LayerCache struct {
	Dir string
}

// Layer builds a gzip-compressed OCI layer from entries.
func (c LayerCache) Layer(entries []Entry, mtime time.Time) (v1.Layer, error) {
	var raw bytes.Buffer
	if err := Tar(&raw, entries, mtime); err != nil {
		return nil, err
	}
	return c.fromTar(raw.Bytes())
}

func (c LayerCache) fromTar(raw []byte) (v1.Layer, error) {
	sum := sha256.Sum256(raw)
	diffID := v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}
	var cached string
	if c.Dir != "" {
		cached = filepath.Join(c.Dir, diffID.Hex+".tar.gz")
		if b, err := os.ReadFile(cached); err == nil {
			return newLayer(b, diffID), nil
		} else if !errors.Is(err, os.ErrNotExist) {
			return nil, err
		}
	}
	var gz bytes.Buffer
	zw, err := gzip.NewWriterLevel(&gz, gzipLevel)
	if err != nil {
		return nil, fmt.Errorf("compressing the layer: %w", err)
	}
	// The gzip header stays at its zero values: no name, no mtime, OS unknown.
	if _, err := zw.Write(raw); err != nil {
		return nil, fmt.Errorf("compressing the layer: %w", err)
	}
	if err := zw.Close(); err != nil {
		return nil, fmt.Errorf("compressing the layer: %w", err)
	}
	if cached != "" {
		if err := writeFileAtomic(cached, gz.Bytes()); err != nil {
			return nil, fmt.Errorf("layer cache: %w", err)
		}
	}
	return newLayer(gz.Bytes(), diffID), nil
}

func writeFileAtomic(name string, data []byte) error {
	if err := os.MkdirAll(filepath.Dir(name), 0o755); err != nil {
		return fmt.Errorf("caching the layer: %w", err)
	}
	f, err := os.CreateTemp(filepath.Dir(name), ".tmp-*")
	if err != nil {
		return fmt.Errorf("caching the layer: %w", err)
	}
	defer os.Remove(f.Name())
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("caching the layer: %w", err)
	}
	return os.Rename(f.Name(), name)
}

// layer is an in-memory gzip layer.
type layer struct {
	compressed []byte
	digest     v1.Hash
	diffID     v1.Hash
}

func newLayer(compressed []byte, diffID v1.Hash) *layer {
	sum := sha256.Sum256(compressed)
	return &layer{compressed: compressed, diffID: diffID, digest: v1.Hash{Algorithm: "sha256", Hex: hex.EncodeToString(sum[:])}}
}

func (l *layer) Digest() (v1.Hash, error) { return l.digest, nil }
func (l *layer) DiffID() (v1.Hash, error) { return l.diffID, nil }
func (l *layer) Compressed() (io.ReadCloser, error) {
	return io.NopCloser(bytes.NewReader(l.compressed)), nil
}
func (l *layer) Uncompressed() (io.ReadCloser, error) {
	zr, err := gzip.NewReader(bytes.NewReader(l.compressed))
	if err != nil {
		return nil, fmt.Errorf("decompressing the layer: %w", err)
	}
	return zr, nil
}
func (l *layer) Size() (int64, error)                { return int64(len(l.compressed)), nil }
func (l *layer) MediaType() (types.MediaType, error) { return types.OCILayer, nil }
