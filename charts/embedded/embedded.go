// Package embedded loads a Helm chart that a Go package embeds, so binaries
// and tests carry their charts with no files on disk.
package embedded

import (
	"fmt"
	"io/fs"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// Load builds the chart named name from every file of fsys. Each call
// returns a fresh chart, so callers may modify it.
func Load(fsys fs.FS, name string) (*chart.Chart, error) {
	var files []*loader.BufferedFile
	err := fs.WalkDir(fsys, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := fs.ReadFile(fsys, path)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: path, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the embedded %s chart: %w", name, err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("loading the embedded %s chart: %w", name, err)
	}
	return c, nil
}
