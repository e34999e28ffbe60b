package main

import "strings"

// Stubs of the pinned rule sets: which .bzl files exist, what they export,
// and the attribute names and types of every rule or macro this repository
// may call. They were written from the rule sets' own sources and docs at
// exactly the versions in pinnedModules (rules_go's go/private/rules/*.bzl,
// gazelle's def.bzl and internal/bzlmod/go_deps.bzl, rules_oci's
// oci/defs.bzl and oci/private/{image,image_index,load,push}.bzl, tar.bzl's
// tar/tar.bzl, bazel_lib's lib/{run_binary,transitions,expand_template,
// copy_file}.bzl, bazel_skylib's rules/{write_file,common_settings}.bzl,
// rules_shell's shell/private/sh_executable.bzl). Bumping a version in
// MODULE.bazel without re-checking these is reported as a mistake.

// pinnedModules are the Bazel modules (and versions) the stubs describe.
var pinnedModules = map[string]string{
	"bazel_lib":    "3.4.0",
	"bazel_skylib": "1.8.1",
	"gazelle":      "0.53.0",
	"platforms":    "1.1.0",
	"rules_go":     "0.64.2",
	"rules_oci":    "2.3.3",
	"rules_shell":  "0.4.1",
	"tar.bzl":      "0.7.0",
}

type attrKind int

const (
	kAny attrKind = iota
	kString
	kStringList
	kStringDict
	kBool
	kInt
	kLabel
	kLabelList
	kLabelKeyedStringDict
	kOutput
	kOutputList
	// kStringListOrLabel: a list of strings given inline, or the label of
	// a file holding them (rules_oci's entrypoint, cmd, repo_tags, ...).
	kStringListOrLabel
	// kStringDictOrLabel: rules_oci's labels, annotations and env.
	kStringDictOrLabel
	// kTemplate: bazel_lib expand_template's template (label or lines).
	kTemplate
	// kMtree: tar.bzl's mtree ("auto", spec lines, or a label).
	kMtree
	kVisibility
)

var kindNames = map[attrKind]string{
	kAny: "any", kString: "string", kStringList: "list of strings", kStringDict: "dict of strings",
	kBool: "bool", kInt: "int", kLabel: "label", kLabelList: "list of labels",
	kLabelKeyedStringDict: "dict label->string", kOutput: "output file name", kOutputList: "list of output file names",
	kStringListOrLabel: "list of strings or label", kStringDictOrLabel: "dict of strings or label",
	kTemplate: "label or list of lines", kMtree: `"auto", list of mtree lines or label`, kVisibility: "list of labels",
}

type attrSpec struct {
	kind      attrKind
	mandatory bool
}

// ruleSpec describes one rule or macro.
type ruleSpec struct {
	name  string
	class string // "rule", "binary", "test"
	attrs map[string]attrSpec
	// expand lists the attributes whose strings undergo $(location) and
	// friends, and deps the attributes whose labels those may name.
	expand []string
	deps   []string
	// implicit returns the extra target names a call declares.
	implicit func(name string, attrs map[string]any) []string
	// check runs rule-specific validation (the rule implementation's fail()s).
	check func(c *checker, t *target)
}

func attrs(kv ...any) map[string]attrSpec {
	m := map[string]attrSpec{}
	for i := 0; i < len(kv); i += 2 {
		switch v := kv[i+1].(type) {
		case attrKind:
			m[kv[i].(string)] = attrSpec{kind: v}
		case attrSpec:
			m[kv[i].(string)] = v
		}
	}
	return m
}

func must(k attrKind) attrSpec { return attrSpec{kind: k, mandatory: true} }

// Attributes every rule has (Bazel's common definitions).
var commonAttrs = attrs(
	"name", must(kString),
	"visibility", kVisibility,
	"tags", kStringList,
	"testonly", kBool,
	"deprecation", kString,
	"features", kStringList,
	"compatible_with", kLabelList,
	"restricted_to", kLabelList,
	"target_compatible_with", kLabelList,
	"exec_compatible_with", kLabelList,
	"exec_group_compatible_with", kAny,
	"exec_properties", kStringDict,
	"toolchains", kLabelList,
	"applicable_licenses", kLabelList,
	"package_metadata", kLabelList,
	"aspect_hints", kLabelList,
	"licenses", kStringList,
	"distribs", kStringList,
)

var binaryAttrs = attrs("args", kStringList, "env", kStringDict, "output_licenses", kStringList)

var testAttrs = attrs(
	"args", kStringList, "env", kStringDict, "env_inherit", kStringList,
	"size", kString, "timeout", kString, "flaky", kBool, "shard_count", kInt, "local", kBool,
)

func (s *ruleSpec) attr(name string) (attrSpec, bool) {
	if a, ok := s.attrs[name]; ok {
		return a, true
	}
	if a, ok := commonAttrs[name]; ok {
		return a, true
	}
	switch s.class {
	case "binary":
		a, ok := binaryAttrs[name]
		return a, ok
	case "test":
		a, ok := testAttrs[name]
		return a, ok
	}
	return attrSpec{}, false
}

func suffixes(sfx ...string) func(string, map[string]any) []string {
	return func(name string, _ map[string]any) []string {
		var out []string
		for _, s := range sfx {
			out = append(out, name+s)
		}
		return out
	}
}

// --- rules_go 0.64.2: go/private/rules/{binary,library,test}.bzl ---

var goCommon = []any{
	"srcs", kLabelList, "data", kLabelList, "deps", kLabelList, "embed", kLabelList,
	"embedsrcs", kLabelList, "importpath", kString, "gc_goopts", kStringList,
	"x_defs", kStringDict, "cgo", kBool, "cdeps", kLabelList, "cppopts", kStringList,
	"copts", kStringList, "cxxopts", kStringList, "clinkopts", kStringList,
}

var goBinary = &ruleSpec{
	name: "go_binary", class: "binary",
	attrs: attrs(append(append([]any{}, goCommon...),
		"gc_linkopts", kStringList, "basename", kString, "out", kString,
		"pure", kString, "static", kString, "race", kString, "msan", kString,
		"gotags", kStringList, "goos", kString, "goarch", kString, "linkmode", kString,
		"pgoprofile", kLabel)...),
	expand: []string{"env", "x_defs"},
	deps:   []string{"data"},
	check:  checkGoRule,
}

var goLibrary = &ruleSpec{
	name: "go_library", class: "rule",
	attrs: attrs(append(append([]any{}, goCommon...),
		"importmap", kString, "importpath_aliases", kStringList)...),
	expand: []string{"x_defs"},
	deps:   []string{"data"},
	check:  checkGoRule,
}

var goTest = &ruleSpec{
	name: "go_test", class: "test",
	attrs: attrs(append(append([]any{}, goCommon...),
		"gc_linkopts", kStringList, "rundir", kString, "linkmode", kString,
		"pure", kString, "static", kString, "race", kString, "msan", kString,
		"gotags", kStringList, "goos", kString, "goarch", kString, "importmap", kString)...),
	// env is expanded by rules_go against data only (test.bzl); args by
	// Bazel against the rule's dependencies.
	expand: []string{"env", "x_defs"},
	deps:   []string{"data"},
	check:  checkGoRule,
}

// --- gazelle 0.53.0: def.bzl ---

var gazelleRule = &ruleSpec{
	name: "gazelle", class: "binary",
	attrs: attrs("gazelle", kLabel, "command", kString, "mode", kString, "external", kString,
		"build_tags", kStringList, "prefix", kString, "extra_args", kStringList,
		"data", kLabelList, "env", kStringDict),
	implicit: suffixes("-runner"),
}

// --- rules_oci 2.3.3: oci/defs.bzl macros over oci/private rules ---

var ociImage = &ruleSpec{
	name: "oci_image", class: "rule",
	attrs: attrs(
		"base", kLabel, "tars", kLabelList, "created", kLabel,
		"entrypoint", kStringListOrLabel, "cmd", kStringListOrLabel,
		"env", kStringDictOrLabel, "labels", kStringDictOrLabel, "annotations", kStringDictOrLabel,
		"exposed_ports", kStringListOrLabel, "volumes", kStringListOrLabel,
		"user", kString, "workdir", kString, "os", kString, "architecture", kString,
		"variant", kString, "resource_set", kString),
	implicit: suffixes(".digest"),
	check: func(c *checker, t *target) {
		// image.bzl: fail("'os' and 'architecture' are mandatory when 'base' is unspecified.")
		if _, ok := t.attrs["base"]; !ok {
			for _, a := range []string{"os", "architecture"} {
				if _, ok := t.attrs[a]; !ok {
					c.report(t.pos, "oci_image %q: %q is mandatory when \"base\" is unspecified (a scratch image)", t.name, a)
				}
			}
		}
	},
}

var ociImageIndex = &ruleSpec{
	name: "oci_image_index", class: "rule",
	attrs:    attrs("images", must(kLabelList), "platforms", kLabelList),
	implicit: suffixes(".digest"),
}

var ociLoad = &ruleSpec{
	name: "oci_load", class: "binary",
	attrs: attrs("image", must(kLabel), "repo_tags", kStringListOrLabel, "format", kString, "loader", kLabel),
}

var ociPush = &ruleSpec{
	name: "oci_push", class: "binary",
	attrs: attrs("image", must(kLabel), "repository", kString, "repository_file", kLabel,
		"remote_tags", kStringListOrLabel),
	check: func(c *checker, t *target) {
		_, r := t.attrs["repository"]
		_, f := t.attrs["repository_file"]
		if r && f {
			c.report(t.pos, "oci_push %q: must specify exactly one of 'repository_file' or 'repository'", t.name)
		}
		for _, repo := range stringsOf(t.attrs["repository"]) {
			last := repo[strings.LastIndex(repo, "/")+1:]
			if strings.Contains(repo, "@") || strings.Contains(last, ":") {
				c.report(t.pos, "oci_push %q: repository %q must not contain a tag or digest", t.name, repo)
			}
		}
	},
}

// --- tar.bzl 0.7.0: tar/tar.bzl (macro over tar_rule) ---

var tarRule = &ruleSpec{
	name: "tar", class: "rule",
	attrs: attrs("srcs", kLabelList, "out", kOutput, "args", kStringList, "compress", kString,
		"compute_unused_inputs", kInt, "mode", kString, "mtree", kMtree, "mutate", kAny, "stamp", kInt),
	// The macro expands mtree lines with expand_template(data = srcs).
	expand: []string{"mtree"},
	deps:   []string{"srcs"},
	implicit: func(name string, a map[string]any) []string {
		out := []string{name + "_mtree"}
		if _, ok := a["out"]; !ok {
			out = append(out, name+".tar")
		}
		return out
	},
}

// --- bazel_lib 3.4.0 ---

var runBinary = &ruleSpec{
	name: "run_binary", class: "rule",
	attrs: attrs("tool", must(kLabel), "srcs", kLabelList, "args", kStringList, "env", kStringDict,
		"outs", kOutputList, "out_dirs", kStringList, "mnemonic", kString, "progress_message", kString,
		"execution_requirements", kStringDict, "use_default_shell_env", kBool, "stamp", kInt,
		"resource_set", kString),
	// ctx.expand_location(targets = srcs) plus the tool and outs.
	expand: []string{"args", "env"},
	deps:   []string{"srcs", "tool", "outs"},
}

var platformTransitionFilegroup = &ruleSpec{
	name: "platform_transition_filegroup", class: "rule",
	attrs: attrs("srcs", kLabelList, "target_platform", must(kLabel)),
}

var platformTransitionBinary = &ruleSpec{
	name: "platform_transition_binary", class: "binary",
	attrs: attrs("binary", kLabel, "target_platform", must(kLabel), "basename", kString),
}

var expandTemplate = &ruleSpec{
	name: "expand_template", class: "rule",
	attrs: attrs("template", must(kTemplate), "out", must(kOutput), "data", kLabelList,
		"substitutions", kStringDict, "stamp_substitutions", kStringDict,
		"is_executable", kBool, "stamp", kInt),
	expand: []string{"substitutions", "stamp_substitutions"},
	deps:   []string{"data"},
}

var copyFile = &ruleSpec{
	name: "copy_file", class: "rule",
	attrs: attrs("src", must(kLabel), "out", must(kOutput), "is_executable", kBool, "allow_symlink", kBool),
}

// --- bazel_skylib 1.8.1 ---

var writeFile = &ruleSpec{
	name: "write_file", class: "rule",
	attrs: attrs("out", must(kOutput), "content", kStringList, "is_executable", kBool, "newline", kString),
}

var stringFlag = &ruleSpec{
	name: "string_flag", class: "rule",
	attrs: attrs("build_setting_default", must(kString), "values", kStringList),
}

var boolFlag = &ruleSpec{
	name: "bool_flag", class: "rule",
	attrs: attrs("build_setting_default", must(kBool)),
}

// --- rules_shell 0.4.1: shell/private/sh_executable.bzl ---

var shAttrs = attrs("srcs", kLabelList, "data", kLabelList, "deps", kLabelList, "env", kStringDict, "env_inherit", kStringList)

var shBinary = &ruleSpec{
	name: "sh_binary", class: "binary", attrs: shAttrs,
	expand: []string{"args", "env"},
	deps:   []string{"srcs", "data", "deps"},
}

var shTest = &ruleSpec{
	name: "sh_test", class: "test", attrs: shAttrs,
	expand: []string{"args", "env"},
	deps:   []string{"srcs", "data", "deps"},
}

// --- Native rules of Bazel 8 available without load ---

var nativeRules = map[string]*ruleSpec{
	"filegroup": {name: "filegroup", class: "rule",
		attrs: attrs("srcs", kLabelList, "data", kLabelList, "output_group", kString)},
	"genrule": {name: "genrule", class: "rule",
		attrs: attrs("srcs", kLabelList, "outs", must(kOutputList), "cmd", kString, "cmd_bash", kString,
			"cmd_bat", kString, "cmd_ps", kString, "tools", kLabelList, "executable", kBool,
			"local", kBool, "message", kString, "output_to_bindir", kBool, "output_licenses", kStringList,
			"stamp", kBool),
		expand: []string{"cmd", "cmd_bash"},
		deps:   []string{"srcs", "tools", "outs"}},
	"test_suite": {name: "test_suite", class: "rule",
		attrs: attrs("tests", kLabelList)},
	"alias": {name: "alias", class: "rule",
		attrs: attrs("actual", must(kLabel))},
	"config_setting": {name: "config_setting", class: "rule",
		attrs: attrs("values", kStringDict, "define_values", kStringDict,
			"flag_values", kLabelKeyedStringDict, "constraint_values", kLabelList)},
	"platform": {name: "platform", class: "rule",
		attrs: attrs("constraint_values", kLabelList, "parents", kLabelList, "flags", kStringList)},
}

// bzlFiles maps a .bzl file (as loaded, with the module's apparent name as
// repository) to its exported symbols.
var bzlFiles = map[string]map[string]*ruleSpec{
	"@rules_go//go:def.bzl": {
		"go_binary": goBinary, "go_library": goLibrary, "go_test": goTest,
	},
	"@gazelle//:def.bzl": {"gazelle": gazelleRule},
	"@rules_oci//oci:defs.bzl": {
		"oci_image": ociImage, "oci_image_index": ociImageIndex, "oci_load": ociLoad, "oci_push": ociPush,
	},
	"@tar.bzl//tar:tar.bzl":                    {"tar": tarRule},
	"@bazel_lib//lib:run_binary.bzl":           {"run_binary": runBinary},
	"@bazel_lib//lib:transitions.bzl":          {"platform_transition_filegroup": platformTransitionFilegroup, "platform_transition_binary": platformTransitionBinary},
	"@bazel_lib//lib:expand_template.bzl":      {"expand_template": expandTemplate},
	"@bazel_lib//lib:copy_file.bzl":            {"copy_file": copyFile},
	"@bazel_skylib//rules:write_file.bzl":      {"write_file": writeFile},
	"@bazel_skylib//rules:common_settings.bzl": {"string_flag": stringFlag, "bool_flag": boolFlag},
	"@rules_shell//shell:sh_binary.bzl":        {"sh_binary": shBinary},
	"@rules_shell//shell:sh_test.bzl":          {"sh_test": shTest},
}

// knownTargets are the targets of pinned modules this repository may
// reference, each checked in the module's sources at the pinned version
// (rules_go declares one platform per GOOS_GOARCH in go/toolchain, with the
// cgo_off constraint; go/config holds the pure and tags flags).
var knownTargets = map[string][]string{
	"rules_go": {
		"//go/toolchain:linux_amd64", "//go/toolchain:linux_arm64",
		"//go/toolchain:darwin_amd64", "//go/toolchain:darwin_arm64",
		"//go/toolchain:cgo_off", "//go/toolchain:cgo_on",
		"//go/config:pure", "//go/config:tags", "//go/config:static", "//go/config:race",
		// go/runfiles/BUILD.bazel: go_library(name = "runfiles").
		"//go/runfiles:runfiles",
		// go/platform/BUILD.bazel: declare_config_settings() (list.bzl)
		// declares a config_setting per GOOS, which gazelle selects for
		// *_linux.go files (android builds them too).
		"//go/platform:linux", "//go/platform:android",
	},
	"platforms": {
		"//cpu:x86_64", "//cpu:arm64", "//cpu:aarch64", "//os:linux", "//os:macos", "//os:windows",
	},
	"bazel_tools": {
		"//tools/bash/runfiles", "//src/conditions:host_windows",
		"//tools/allowlists/function_transition_allowlist",
	},
}

// Module extensions: file -> extension name -> tag -> attributes.
var extensions = map[string]map[string]map[string]map[string]attrSpec{
	// rules_go go/private/extensions.bzl
	"@rules_go//go:extensions.bzl": {
		"go_sdk": {
			"download":  withCommon(goSDKCommon, attrs("version", kString)),
			"from_file": withCommon(goSDKCommon, attrs("go_mod", kLabel, "go_work", kLabel)),
			"host":      attrs("name", kString, "version", kString, "experiments", kStringList),
			"nogo":      attrs("nogo", must(kLabel), "includes", kLabelList, "excludes", kLabelList),
			"wrap":      attrs("root_file", kLabel, "version", kString, "experiments", kStringList, "goos", kString, "goarch", kString),
		},
	},
	// gazelle internal/bzlmod/go_deps.bzl
	"@gazelle//:extensions.bzl": {
		"go_deps": {
			"config":    attrs("check_direct_dependencies", kString, "go_env", kStringDict, "go_env_inherit", kStringList, "debug_mode", kBool),
			"from_file": attrs("go_mod", kLabel, "go_work", kLabel, "fail_on_version_conflict", kBool),
			"module": attrs("path", must(kString), "version", must(kString), "sum", kString, "indirect", kBool,
				"local_path", kString),
			"archive_override": attrs("path", must(kString), "urls", kStringList, "strip_prefix", kString,
				"sha256", kString, "patches", kLabelList, "patch_strip", kInt, "patch_cmds", kStringList),
			"gazelle_override":           withCommon(gazelleAttrs, attrs("path", must(kString))),
			"gazelle_default_attributes": gazelleAttrs,
			"module_override": attrs("path", must(kString), "patches", kLabelList, "patch_strip", kInt,
				"patch_cmds", kStringList, "repo_name", kString),
		},
	},
}

// Repositories an extension creates for the root module besides go_deps'
// per-module ones (rules_go's own MODULE.bazel imports these).
var extensionRepos = map[string][]string{
	"go_sdk": {"go_toolchains", "go_host_compatible_sdk_label", "go_default_sdk"},
}

var goSDKCommon = attrs("name", kString, "goos", kString, "goarch", kString, "sdks", kAny,
	"experiments", kStringList, "urls", kStringList, "patches", kLabelList, "patch_strip", kInt,
	"strip_prefix", kString, "experimental_build_compiler_from_source", kBool)

var gazelleAttrs = attrs("build_file_generation", kString, "build_extra_args", kStringList, "directives", kStringList)

func withCommon(a, b map[string]attrSpec) map[string]attrSpec {
	m := map[string]attrSpec{}
	for k, v := range a {
		m[k] = v
	}
	for k, v := range b {
		m[k] = v
	}
	return m
}
