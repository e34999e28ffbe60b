package inferencestack

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"text/template"
	"text/template/parse"

	"github.com/Masterminds/sprig/v3"
)

// A stack's spec is written by a tenant and rendered with the operator's
// cluster-wide power, so no value may change the shape of what the chart
// renders: every interpolated value is quoted (quote, toJson) or a whole
// YAML block (toYaml or a YAML helper, under nindent). These tests keep it
// so: TestTemplatesQuoteValues reads the templates, TestHostileStrings
// renders them.

// helperKinds classifies every named template of the chart by what its
// output is, which decides how it may be used:
//   - value: a scalar (a name, an image reference) that callers quote;
//   - yaml: YAML whose values are quoted or blocks, used under nindent;
//   - silent: no output; it fills a dict passed in (include for effect).
//
// A new helper must be classified here.
var helperKinds = map[string]string{
	"inference-stack.name":                    "value",
	"inference-stack.fullname":                "value",
	"inference-stack.gateway.name":            "value",
	"inference-stack.chart":                   "value",
	"inference-stack.serviceAccountName":      "value",
	"inference-stack.image":                   "value",
	"inference-stack.internalPort":            "value",
	"inference-stack.application.fullname":    "value",
	"inference-stack.kedaAvailable":           "value",
	"inference-stack.selectorLabels":          "yaml",
	"inference-stack.labels":                  "yaml",
	"inference-stack.podLabels":               "yaml",
	"inference-stack.podAnnotations":          "yaml",
	"inference-stack.containerPorts":          "yaml",
	"inference-stack.gateway.env":             "yaml",
	"inference-stack.application.config":      "yaml",
	"inference-stack.gateway.config":          "yaml",
	"inference-stack.strategy":                "yaml",
	"inference-stack.snakeKeys":               "silent",
	"inference-stack.application.values":      "silent",
	"inference-stack.application.accessToken": "silent",
	"inference-stack.application.requests":    "silent",
	"inference-stack.application.gpu":         "silent",
}

// quoting are the functions whose output is one YAML flow scalar whatever
// their input: a quoted string, JSON, or a number.
var quoting = []string{"quote", "squote", "toJson", "mustToJson", "int", "int64", "atoi", "len"}

// checkTemplates parses templates (name → source) as Helm does and
// returns, for every action that writes a value into a manifest without
// quoting it, "file:line: action: why".
func checkTemplates(templates map[string]string) ([]string, error) {
	funcs := template.FuncMap{}
	for name, f := range sprig.TxtFuncMap() {
		funcs[name] = f
	}
	// Helm's own functions (helm.sh/helm/v3/pkg/engine funcMap).
	for _, name := range []string{"include", "tpl", "required", "toYaml", "toYamlPretty", "fromYaml", "fromYamlArray",
		"toJson", "fromJson", "fromJsonArray", "toToml", "fromToml", "lookup", "mustToJson"} {
		funcs[name] = func(...any) any { return nil }
	}
	var problems []string
	names := slices.Sorted(func(yield func(string) bool) {
		for n := range templates {
			if !yield(n) {
				return
			}
		}
	})
	for _, file := range names {
		if strings.HasSuffix(file, "NOTES.txt") {
			continue // shown to people, never applied
		}
		src := templates[file]
		t, err := template.New(file).Funcs(funcs).Parse(src)
		if err != nil {
			return nil, fmt.Errorf("parsing %s: %w", file, err)
		}
		for _, tt := range t.Templates() {
			if tt.Tree == nil || tt.Tree.Root == nil {
				continue
			}
			kind := "template"
			if tt.Name() != file {
				var ok bool
				if kind, ok = helperKinds[tt.Name()]; !ok {
					problems = append(problems, fmt.Sprintf("%s: helper %q is not classified in helperKinds (value, yaml or silent)", file, tt.Name()))
					continue
				}
			}
			c := &checker{file: file, src: src, kind: kind}
			c.list(tt.Tree.Root, false)
			problems = append(problems, c.problems...)
		}
	}
	return problems, nil
}

type checker struct {
	file, src, kind string
	problems        []string
}

func (c *checker) fail(n parse.Node, why string) {
	line := 1 + strings.Count(c.src[:int(n.Position())], "\n")
	c.problems = append(c.problems, fmt.Sprintf("%s:%d: {{ %s }}: %s", c.file, line, n.String(), why))
}

// list walks the nodes; dotIsYAML says "." is the output of a YAML helper
// (inside `with include "yaml-helper" ...`).
func (c *checker) list(l *parse.ListNode, dotIsYAML bool) {
	if l == nil {
		return
	}
	for _, n := range l.Nodes {
		switch n := n.(type) {
		case *parse.ActionNode:
			c.action(n, dotIsYAML)
		case *parse.IfNode:
			c.list(n.List, dotIsYAML)
			c.list(n.ElseList, dotIsYAML)
		case *parse.RangeNode:
			c.list(n.List, false)
			c.list(n.ElseList, dotIsYAML)
		case *parse.WithNode:
			c.list(n.List, c.isYAML(n.Pipe, dotIsYAML))
			c.list(n.ElseList, dotIsYAML)
		case *parse.TemplateNode:
			c.fail(n, "use include, so that the helper's output can be quoted or indented")
		}
	}
}

// action checks one {{ ... }} that is not control flow.
func (c *checker) action(n *parse.ActionNode, dotIsYAML bool) {
	p := n.Pipe
	for _, cmd := range p.Cmds {
		if funcName(cmd) == "tpl" {
			c.fail(n, "tpl renders a value as a template: a tenant's string would run as template code")
			return
		}
	}
	if len(p.Decl) > 0 {
		return // an assignment writes nothing
	}
	last := p.Cmds[len(p.Cmds)-1]
	fn := funcName(last)
	switch {
	case fn == "include" && len(p.Cmds) == 1:
		switch kind := c.helperKind(last); {
		case kind == "silent":
		case kind == "value" && c.kind == "value":
			// a value helper returning another's value
		case kind == "value":
			c.fail(n, "a value helper's output must be quoted (| quote)")
		case kind == "yaml" && c.kind == "yaml" && c.atLineStart(n):
			// the helper's YAML, which its callers indent as a block
		default:
			c.fail(n, "a YAML helper's output must be indented as a block (| nindent N)")
		}
	case slices.Contains(quoting, fn), fn == "fail":
		return
	case c.kind == "yaml" && c.atLineStart(n) && fn == "toYaml":
		return // the helper's YAML, which its callers indent as a block
	case fn == "nindent" || fn == "indent":
		if c.isYAML(p, dotIsYAML) {
			return
		}
		c.fail(n, "only toYaml or a YAML helper may be indented as a block; quote a scalar instead")
	case fn == "toYaml":
		c.fail(n, "toYaml inline can write several lines and break out of the key; use toJson for a scalar or `| nindent N` on a line of its own for a block")
	default:
		if c.kind == "value" {
			return // the helper's return value; its callers quote it
		}
		c.fail(n, "an interpolated value must be quoted: | quote for strings, toJson for numbers and booleans")
	}
}

// atLineStart reports whether the action is the first thing on its line.
func (c *checker) atLineStart(n parse.Node) bool {
	pos := int(n.Position())
	start := strings.LastIndexByte(c.src[:pos], '\n') + 1
	before := strings.TrimSpace(c.src[start:pos])
	return before == "{{" || before == "{{-"
}

// isYAML reports whether the pipeline's output, before any indent, is YAML
// the chart produced: toYaml of a value, a YAML helper, or a "." bound to
// one.
func (c *checker) isYAML(p *parse.PipeNode, dotIsYAML bool) bool {
	if p == nil || len(p.Cmds) == 0 {
		return false
	}
	first := p.Cmds[0]
	switch funcName(first) {
	case "toYaml":
		return true
	case "include":
		return c.helperKind(first) == "yaml"
	}
	if len(first.Args) == 1 {
		if _, ok := first.Args[0].(*parse.DotNode); ok {
			return dotIsYAML
		}
	}
	return false
}

func (c *checker) helperKind(cmd *parse.CommandNode) string {
	if len(cmd.Args) < 2 {
		return ""
	}
	s, ok := cmd.Args[1].(*parse.StringNode)
	if !ok {
		return ""
	}
	return helperKinds[s.Text]
}

func funcName(cmd *parse.CommandNode) string {
	if len(cmd.Args) == 0 {
		return ""
	}
	if id, ok := cmd.Args[0].(*parse.IdentifierNode); ok {
		return id.Ident
	}
	return ""
}

// TestTemplatesQuoteValues: no template of the chart interpolates a value
// unquoted, and the check finds each kind of mistake it is meant to.
func TestTemplatesQuoteValues(t *testing.T) {
	c, err := Load()
	if err != nil {
		t.Fatal(err)
	}
	templates := map[string]string{}
	for _, f := range c.Templates {
		templates[f.Name] = string(f.Data)
	}
	problems, err := checkTemplates(templates)
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range problems {
		t.Error(p)
	}

	// Planted mistakes, each in a copy of a real template.
	helpers := templates["templates/_helpers.tpl"]
	for _, tc := range []struct{ name, src, want string }{
		{"bare value", "name: {{ .Values.serviceAccount.name }}\n", "must be quoted"},
		{"bare variable", "{{- $x := .Values.nameOverride }}\nname: {{ $x }}\n", "must be quoted"},
		{"inline toYaml", "targetPort: {{ toYaml .Values.gateway.service }}\n", "toYaml inline"},
		{"unquoted value helper", `name: {{ include "inference-stack.fullname" . }}` + "\n", "must be quoted"},
		{"YAML helper inline", `labels: {{ include "inference-stack.labels" . }}` + "\n", "indented as a block"},
		{"indented scalar", "name:\n  {{- .Values.nameOverride | nindent 2 }}\n", "only toYaml"},
		{"printf", `name: {{ printf "%s-x" .Release.Name }}` + "\n", "must be quoted"},
		{"tpl", "x: {{ tpl .Values.nameOverride . | quote }}\n", "tpl renders"},
		{"unclassified helper", `{{- define "inference-stack.new" }}{{ .x }}{{ end }}`, "not classified"},
	} {
		got, err := checkTemplates(map[string]string{"templates/_helpers.tpl": helpers, "templates/planted.yaml": tc.src})
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if len(got) == 0 || !strings.Contains(strings.Join(got, "\n"), tc.want) {
			t.Errorf("planted %s: the check said %q, want a problem saying %q", tc.name, got, tc.want)
		}
	}
}
