// Command bumpchart writes the inference-stack chart's Chart.yaml with the
// next minor version (scenario.BumpChartMinor, the change the OLM
// scenario's 0.2.0 ships). The Bazel build of the scenario runs it to
// compile that 0.2.0 operator (e2e/scenario/BUILD.bazel), since under Bazel
// the scenario packages prebuilt binaries instead of compiling its edited
// copy of the source.
//
//	bumpchart -in charts/inference-stack/Chart.yaml -out next/Chart.yaml
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"github.com/titanml/inference-stack-operator/e2e/scenario"
)

func main() {
	in := flag.String("in", "", "the chart's Chart.yaml")
	out := flag.String("out", "", "where to write it with the next minor version")
	flag.Parse()
	if err := run(*in, *out); err != nil {
		fmt.Fprintln(os.Stderr, "bumpchart:", err)
		os.Exit(1)
	}
}

func run(in, out string) error {
	if in == "" || out == "" {
		return fmt.Errorf("-in and -out are required")
	}
	data, err := os.ReadFile(in)
	if err != nil {
		return err
	}
	// BumpChartMinor edits a source tree; give it one holding the file.
	root, err := os.MkdirTemp("", "bumpchart-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(root)
	chart := filepath.Join(root, "charts", "inference-stack", "Chart.yaml")
	if err := os.MkdirAll(filepath.Dir(chart), 0o755); err != nil {
		return err
	}
	if err := os.WriteFile(chart, data, 0o644); err != nil {
		return err
	}
	version, err := scenario.BumpChartMinor(root)
	if err != nil {
		return err
	}
	if data, err = os.ReadFile(chart); err != nil {
		return err
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		return err
	}
	fmt.Printf("chart version %s\n", version)
	return nil
}
