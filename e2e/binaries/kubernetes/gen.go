//go:build ignore

// gen rewrites this wrapper module's go.mod so that it requires
// k8s.io/kubernetes at the pinned version and replaces every staging module
// that k8s.io/kubernetes lists at v0.0.0 with the matching published staging
// version (v1.X.Y -> v0.X.Y).
//
// Why: k8s.io/kubernetes's go.mod points its staging modules (k8s.io/api,
// k8s.io/client-go, ...) at ./staging/src/... with `replace`, which a
// dependent module does not inherit; without our own replace lines the build
// asks the proxy for k8s.io/api@v0.0.0, which does not exist. The list is
// derived from k8s.io/kubernetes's own go.mod so a version bump cannot miss a
// module that was added or removed upstream.
//
// Usage (from this directory):
//
//	go run gen.go [-version v1.34.4]
//	go mod tidy
package main

import (
	"bytes"
	"encoding/json"
	"flag"
	"fmt"
	"log"
	"os"
	"os/exec"
	"strings"
)

// modFile is the subset of `go mod edit -json` output that gen needs.
type modFile struct {
	Go      string
	Godebug []struct{ Key, Value string }
	Require []struct {
		Path    string
		Version string
	}
	Replace []struct {
		Old struct{ Path string }
	}
}

func main() {
	version := flag.String("version", "v1.34.4", "k8s.io/kubernetes version to pin")
	flag.Parse()
	if !strings.HasPrefix(*version, "v1.") {
		log.Fatalf("version %q: want v1.X.Y", *version)
	}
	// Published staging modules carry the same minor/patch with major 0.
	stagingVersion := "v0." + strings.TrimPrefix(*version, "v1.")

	upstream, err := readUpstreamGoMod(*version)
	if err != nil {
		log.Fatal(err)
	}

	args := []string{"mod", "edit",
		"-require=k8s.io/kubernetes@" + *version,
		// Match upstream's language version and GODEBUG defaults: the
		// binaries' runtime behaviour (e.g. TLS/x509 defaults) then matches
		// what upstream ships and tests.
		"-go=" + upstream.Go,
	}
	for _, g := range upstream.Godebug {
		args = append(args, "-godebug="+g.Key+"="+g.Value)
	}
	var staged []string
	for _, r := range upstream.Require {
		if r.Version != "v0.0.0" {
			continue
		}
		staged = append(staged, r.Path)
		args = append(args, fmt.Sprintf("-replace=%s=%s@%s", r.Path, r.Path, stagingVersion))
	}
	if len(staged) == 0 {
		log.Fatalf("k8s.io/kubernetes@%s lists no v0.0.0 requirements; has its layout changed?", *version)
	}
	// Drop replaces left over from an older version for staging modules
	// that upstream no longer has, so the list stays exactly upstream's.
	current, err := goModEditJSON("go.mod")
	if err != nil {
		log.Fatal(err)
	}
	isStaged := map[string]bool{}
	for _, p := range staged {
		isStaged[p] = true
	}
	for _, r := range current.Replace {
		if strings.HasPrefix(r.Old.Path, "k8s.io/") && !isStaged[r.Old.Path] {
			args = append(args, "-dropreplace="+r.Old.Path)
		}
	}
	cmd := exec.Command("go", args...)
	cmd.Stdout, cmd.Stderr = os.Stdout, os.Stderr
	if err := cmd.Run(); err != nil {
		log.Fatalf("go mod edit: %v", err)
	}
	fmt.Fprintf(os.Stderr, "k8s.io/kubernetes %s: replaced %d staging modules with %s: %s\nnow run: go mod tidy\n",
		*version, len(staged), stagingVersion, strings.Join(staged, " "))
}

// readUpstreamGoMod downloads (or finds in the module cache) the go.mod of
// k8s.io/kubernetes at version and parses it.
func readUpstreamGoMod(version string) (*modFile, error) {
	out, err := exec.Command("go", "mod", "download", "-json", "k8s.io/kubernetes@"+version).Output()
	if err != nil {
		return nil, fmt.Errorf("go mod download k8s.io/kubernetes@%s: %w", version, err)
	}
	var dl struct{ GoMod, Error string }
	if err := json.Unmarshal(out, &dl); err != nil {
		return nil, fmt.Errorf("parsing go mod download output: %w", err)
	}
	if dl.Error != "" {
		return nil, fmt.Errorf("go mod download k8s.io/kubernetes@%s: %s", version, dl.Error)
	}
	return goModEditJSON(dl.GoMod)
}

func goModEditJSON(path string) (*modFile, error) {
	var stderr bytes.Buffer
	cmd := exec.Command("go", "mod", "edit", "-json", path)
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("go mod edit -json %s: %w: %s", path, err, stderr.String())
	}
	var m modFile
	if err := json.Unmarshal(out, &m); err != nil {
		return nil, fmt.Errorf("parsing %s: %w", path, err)
	}
	return &m, nil
}
