// Package inferencestack embeds the inference-stack Helm chart, the chart the
// operator installs for every InferenceStack (whose spec is the values), so
// the operator binary carries it and needs no chart files on disk.
package inferencestack

import (
	"embed"

	"helm.sh/helm/v3/pkg/chart"

	"github.com/titanml/inference-stack-operator/charts/embedded"
)

// Files is the chart as it sits in this directory. The "all:" prefix keeps
// files whose names start with "_" or "." (such as _helpers.tpl).
//
//go:embed Chart.yaml values.yaml values.schema.json .helmignore README.md all:templates
var Files embed.FS

// Load builds the chart from the embedded files. Each call returns a fresh
// chart, so callers may modify it.
func Load() (*chart.Chart, error) {
	return embedded.Load(Files, "inference-stack")
}
