package main

import (
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// goMod is the part of a go.mod file the checker needs.
type goMod struct {
	Module    string
	Go        string
	Toolchain string
	Requires  []goRequire
}

type goRequire struct {
	Path     string
	Version  string
	Indirect bool
	Line     int
}

// parseGoMod reads module, go and require directives (single-line and
// blocks), keeping the "// indirect" marker. Other directives are skipped.
func parseGoMod(data []byte) (*goMod, error) {
	m := &goMod{}
	block := ""
	for i, raw := range strings.Split(string(data), "\n") {
		line := strings.TrimSpace(raw)
		comment := ""
		if j := strings.Index(line, "//"); j >= 0 {
			comment = strings.TrimSpace(line[j+2:])
			line = strings.TrimSpace(line[:j])
		}
		if line == "" {
			continue
		}
		if block != "" {
			if line == ")" {
				block = ""
				continue
			}
			if block == "require" {
				if err := m.addRequire(line, comment, i+1); err != nil {
					return nil, err
				}
			}
			continue
		}
		verb, rest, _ := strings.Cut(line, " ")
		rest = strings.TrimSpace(rest)
		if rest == "(" {
			block = verb
			continue
		}
		switch verb {
		case "module":
			m.Module = unquote(rest)
		case "go":
			m.Go = rest
		case "toolchain":
			m.Toolchain = rest
		case "require":
			if err := m.addRequire(rest, comment, i+1); err != nil {
				return nil, err
			}
		}
	}
	if m.Module == "" {
		return nil, fmt.Errorf("go.mod has no module directive")
	}
	return m, nil
}

func (m *goMod) addRequire(s, comment string, line int) error {
	f := strings.Fields(s)
	if len(f) != 2 {
		return fmt.Errorf("go.mod:%d: malformed require %q", line, s)
	}
	indirect := comment == "indirect" || strings.HasPrefix(comment, "indirect;")
	m.Requires = append(m.Requires, goRequire{Path: unquote(f[0]), Version: unquote(f[1]), Indirect: indirect, Line: line})
	return nil
}

func unquote(s string) string {
	if u, err := strconv.Unquote(s); err == nil {
		return u
	}
	return s
}

// bazelGoModules are the Go modules that bazel_deps provide: their own
// MODULE.bazel reads the module's go.mod with go_deps.from_file, so go_deps
// creates no repository for them, uses the Bazel module instead (requiring
// the same version) and gazelle labels their packages @<bazel module>//...
// (gazelle's internal/bzlmod/go_deps.bzl, bazel_go_modules).
var bazelGoModules = map[string]string{
	"github.com/bazelbuild/rules_go":      "rules_go",
	"github.com/bazelbuild/bazel-gazelle": "gazelle",
}

var nonWord = regexp.MustCompile(`\W+`)

// repoName is the Bazel repository name go_deps (gazelle) gives the module
// at importPath: reversed host labels, then the path, non-word runs as "_".
// It is gazelle's label.ImportPathToBazelRepoName.
func repoName(importPath string) string {
	importPath = strings.ToLower(importPath)
	components := strings.Split(importPath, "/")
	labels := strings.Split(components[0], ".")
	reversed := make([]string, 0, len(labels)+len(components)-1)
	for i := range labels {
		reversed = append(reversed, labels[len(labels)-i-1])
	}
	return nonWord.ReplaceAllString(strings.Join(append(reversed, components[1:]...), "."), "_")
}

// escapeModulePath is the module cache's case encoding ("!" + lower case).
func escapeModulePath(p string) string {
	var b strings.Builder
	for _, r := range p {
		if 'A' <= r && r <= 'Z' {
			b.WriteByte('!')
			b.WriteRune(r + ('a' - 'A'))
		} else {
			b.WriteRune(r)
		}
	}
	return b.String()
}

var pkgVersionRe = regexp.MustCompile(`^v[0-9]+$`)

// goLibName is the target name gazelle's "import" naming convention gives
// the library of an import path (gazelle's libNameFromImportPath).
func goLibName(importPath string) string {
	i := strings.LastIndex(importPath, "/")
	if i < 0 {
		return strings.ReplaceAll(importPath, ".", "_")
	}
	name := importPath[i+1:]
	if pkgVersionRe.MatchString(name) {
		dir := importPath[:i]
		if j := strings.LastIndex(dir, "/"); j >= 0 {
			name = dir[j+1:]
		}
	}
	return strings.ReplaceAll(name, ".", "_")
}
