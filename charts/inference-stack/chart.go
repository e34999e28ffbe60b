// Package inferencestack embeds the inference-stack Helm chart, the chart the
// operator installs for every InferenceStack (whose spec is the values), so
// the operator binary carries it and needs no chart files on disk.
package inferencestack

import (
	"embed"
	"fmt"
	"io/fs"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
)

// Files is the chart as it sits in this directory. The "all:" prefix keeps
// files whose names start with "_" or "." (such as _helpers.tpl).
//
//go:embed Chart.yaml values.yaml values.schema.json .helmignore README.md all:templates
var Files embed.FS

// Load builds the chart from the embedded files. Each call returns a fresh
// chart, so callers may modify it.
func Load() (*chart.Chart, error) {
	var files []*loader.BufferedFile
	err := fs.WalkDir(Files, ".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return err
		}
		data, err := Files.ReadFile(path)
		if err != nil {
			return err
		}
		files = append(files, &loader.BufferedFile{Name: path, Data: data})
		return nil
	})
	if err != nil {
		return nil, fmt.Errorf("reading the embedded inference-stack chart: %w", err)
	}
	c, err := loader.LoadFiles(files)
	if err != nil {
		return nil, fmt.Errorf("loading the embedded inference-stack chart: %w", err)
	}
	return c, nil
}
