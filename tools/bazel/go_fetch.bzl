"""Repositories made by running the Go toolchain at fetch time.

The module extension `go_fetch` (used in MODULE.bazel) creates:

- `module_proxy`: a GOPROXY=file:// directory holding every module that
  go.mod and go.sum pin (`go mod download`). The operator image's compile
  actions (operator/BUILD.bazel) build offline from it with `go build`, so
  that the Bazel build compiles the operator exactly as the Go-native build
  does and the image digests are the same.
- `test_binaries`: one repository per source of
  e2e/harness/localcluster/binaries.json (the local cluster's kube-apiserver, etcd,
  kwok, the real node's kubelet, OLM's controllers, OLM v0's, the stock
  helm-operator, cosign), built with `go build`
  from the pinned wrapper modules under e2e/binaries (or the pinned OLM
  module, checked against its h1: sum) with the flags that file gives, the
  same builds the Go-native test harness caches. The e2e tests get them as
  runfiles (see e2e/BUILD.bazel).

Both use the Go SDK that go.mod's toolchain line names (the `go_sdk`
repository of rules_go's go_sdk extension), with GOTOOLCHAIN=local, and the
module proxy of the environment ($GOPROXY, default proxy.golang.org).
Everything they fetch is pinned by a go.sum or an h1: sum.
"""

_DEFAULT_GOPROXY = "https://proxy.golang.org,direct"

# A kubernetes build takes 5 to 16 minutes on two cores.
_TIMEOUT = 7200

def _go_root(rctx):
    return rctx.path(rctx.attr.go_sdk_root).dirname

def _go_command(rctx):
    return _go_root(rctx).get_child("bin").get_child("go")

def _go_env(rctx, work, nosumdb = ""):
    """Returns the environment of the go command.

    Every knob that changes the output is pinned (as the Go-native harness
    does), the caches are under work, and the module proxy settings come
    from the environment (read with getenv, so that a change re-runs the
    rule).

    Args:
      rctx: the repository context.
      work: the scratch directory (a path).
      nosumdb: a module path to exempt from the checksum database.

    Returns:
      A dict of environment variables.
    """
    nosumdbs = [m for m in [rctx.getenv("GONOSUMDB", ""), nosumdb] if m]
    env = {
        "CGO_ENABLED": "0",
        "GO111MODULE": "on",
        "GOARCH": "",
        "GOCACHE": str(work.get_child("gocache")),
        "GOENV": "off",
        "GOEXPERIMENT": "",
        # -modcacherw: the module cache is removed when the rule is done.
        # -buildvcs=false: as the Go-native harness builds.
        "GOFLAGS": "-modcacherw -buildvcs=false",
        "GOMODCACHE": str(work.get_child("gomodcache")),
        "GONOSUMDB": ",".join(nosumdbs),
        "GOOS": "",
        "GOPATH": str(work.get_child("gopath")),
        "GOPROXY": rctx.getenv("GOPROXY", _DEFAULT_GOPROXY),
        # The SDK this rule was given, whatever GOROOT the environment of
        # Bazel's server holds (execute passes that environment on).
        "GOROOT": str(_go_root(rctx)),
        "GOTOOLCHAIN": "local",
        "GOWORK": "off",
        "HOME": str(work),
    }
    for name in ["GONOPROXY", "GOPRIVATE", "GOSUMDB", "GOINSECURE"]:
        value = rctx.getenv(name, "")
        if value:
            env[name] = value
    return env

def _copy(rctx, src, dst):
    """Copies a file byte for byte.

    rctx.read and rctx.file would re-encode non-ASCII text.

    Args:
      rctx: the repository context.
      src: the file, a path or a label.
      dst: the copy, relative to the repository.
    """
    rctx.file(dst + ".keep", "")  # creates the directory
    rctx.delete(dst + ".keep")
    _run(rctx, ["cp", str(rctx.path(src)), dst], {}, "", "copying " + dst)

def _run(rctx, args, env, working_directory, what):
    rctx.report_progress(what)
    res = rctx.execute(args, environment = env, working_directory = working_directory, timeout = _TIMEOUT, quiet = True)
    if res.return_code != 0:
        fail("{} failed ({}):\n{}\n{}".format(what, " ".join([str(a) for a in args]), res.stdout, res.stderr))
    return res

def _module_proxy_impl(rctx):
    go = _go_command(rctx)
    work = rctx.path("work")
    _copy(rctx, rctx.attr.go_mod, "work/module/go.mod")
    _copy(rctx, rctx.attr.go_sum, "work/module/go.sum")
    _run(rctx, [go, "mod", "download"], _go_env(rctx, work), str(work.get_child("module")), "go mod download (modules of go.sum)")
    _run(rctx, ["mv", str(work.get_child("gomodcache").get_child("cache").get_child("download")), "proxy"], {}, "", "moving the module downloads")
    rctx.delete("work")

    # The compile step is given this file's path and uses its directory as
    # GOPROXY=file://...; no module path is a single word, so it cannot clash.
    rctx.file("proxy/ROOT", "")
    rctx.file("BUILD.bazel", _module_proxy_build(rctx.attr))
    return _reproducible(rctx)

def _reproducible(rctx):
    """Marks the repository reproducible (Bazel 8.3 and later).

    Its contents are a function of the attributes, the SDK and the
    environment variables read with getenv: every module is pinned by a
    go.sum or h1: sum and `go build -trimpath` is reproducible. With
    --repo_contents_cache, a runner then reuses the result of an earlier
    fetch instead of building again.

    Args:
      rctx: the repository context.

    Returns:
      The repository's metadata, or None before Bazel 8.3.
    """
    if hasattr(rctx, "repo_metadata"):
        return rctx.repo_metadata(reproducible = True)
    return None

def _module_proxy_build(attr):
    return """\
# The modules of {go_mod}, as a GOPROXY=file:// directory (go mod download).
filegroup(
    name = "proxy",
    srcs = glob(["proxy/**"]),
    visibility = ["//visibility:public"],
)

exports_files(
    ["proxy/ROOT"],
    visibility = ["//visibility:public"],
)
""".format(go_mod = attr.go_mod)

module_proxy = repository_rule(
    implementation = _module_proxy_impl,
    attrs = {
        "go_mod": attr.label(mandatory = True, allow_single_file = True),
        "go_sdk_root": attr.label(mandatory = True, allow_single_file = True),
        "go_sum": attr.label(mandatory = True, allow_single_file = True),
    },
    doc = "A GOPROXY=file:// directory with the modules go.mod and go.sum pin.",
)

def _test_binaries_impl(rctx):
    go = _go_command(rctx)
    work = rctx.path("work")
    source = json.decode(rctx.attr.source)
    env = _go_env(rctx, work, nosumdb = source.get("module", ""))
    if rctx.attr.module_files:
        # A wrapper module of this repository: its go.mod and go.sum, at
        # the module's root whatever package of this repository their
        # labels name (f.name is relative to that package).
        for f in rctx.attr.module_files:
            _copy(rctx, f, "work/module/" + rctx.path(f).basename)
        module_dir = str(work.get_child("module"))
    else:
        # A module of the proxy, built inside its own go.mod (its replace
        # directives apply), as the Go-native harness does. The checksum
        # database does not serve it (hence GONOSUMDB above); its zip is
        # checked against the pinned h1: sum instead.
        ref = "{}@{}".format(source["module"], source["version"])
        rctx.file("work/download/.keep", "")
        res = _run(rctx, [go, "mod", "download", "-json", ref], dict(env, GOFLAGS = "-modcacherw -mod=mod"), str(work.get_child("download")), "go mod download " + ref)
        info = json.decode(res.stdout)
        if info.get("Sum", "") != source["sum"]:
            fail("{} has hash {}, want the pinned {}: refusing to build it".format(ref, info.get("Sum", ""), source["sum"]))
        module_dir = info["Dir"]
    for build in source["builds"]:
        args = [go, "build", "-mod=readonly", "-trimpath"]
        if build.get("tags"):
            args += ["-tags", ",".join(build["tags"])]
        if build.get("ldflags"):
            args += ["-ldflags", build["ldflags"]]
        out = rctx.path("bin")
        if len(build["packages"]) == 1:
            args += ["-o", str(out.get_child(build["outputs"][0]))]
        else:
            # One invocation for several commands shares their compile work.
            args += ["-o", str(out) + "/"]
        rctx.file("bin/.keep", "")
        _run(rctx, args + build["packages"], env, module_dir, "go build {} {} ({})".format(build["name"], build["version"], build.get("estimate", "")))
    for f in source.get("files", []):
        _copy(rctx, module_dir + "/" + f, "files/" + f)
    rctx.delete("work")
    rctx.delete("bin/.keep")
    rctx.file("BUILD.bazel", _test_binaries_build(rctx.attr))
    return _reproducible(rctx)

def _test_binaries_build(attr):
    source = json.decode(attr.source)
    binaries = []
    for build in source["builds"]:
        binaries += ["bin/" + o for o in build["outputs"]]
    files = ["files/" + f for f in source.get("files", [])]
    module_files = ""
    if files:
        module_files = """
# The module's files a test reads, under files/ as in the module.
filegroup(
    name = "module_files",
    srcs = {files},
    visibility = ["//visibility:public"],
)
""".format(files = repr(files))
    return """\
# {name}: built by `go build` from {what} (see e2e/harness/localcluster/binaries.json).
filegroup(
    name = "binaries",
    srcs = {binaries},
    visibility = ["//visibility:public"],
)
{module_files}
exports_files(
    {exported},
    visibility = ["//visibility:public"],
)
""".format(
        name = source["name"],
        what = source.get("module_dir", "") or "{}@{}".format(source["module"], source["version"]),
        binaries = repr(binaries),
        module_files = module_files,
        exported = repr(binaries + files),
    )

test_binaries = repository_rule(
    implementation = _test_binaries_impl,
    attrs = {
        "go_sdk_root": attr.label(mandatory = True, allow_single_file = True),
        "module_files": attr.label_list(allow_files = True),
        "source": attr.string(mandatory = True),
    },
    doc = "Binaries built by `go build` from one source of e2e/harness/localcluster/binaries.json.",
)

# The BUILD file each repository rule writes, a function of the rule's
# attributes only, so that tools/bazelcheck can check labels into these
# repositories (and count the files their targets provide) without
# fetching anything.
REPO_BUILD_FILES = {
    "module_proxy": _module_proxy_build,
    "test_binaries": _test_binaries_build,
}

# The SDK of go.mod's toolchain line (use_repo(go_sdk, "go_sdk") in MODULE.bazel).
_GO_SDK_ROOT = Label("@go_sdk//:ROOT")

def _go_fetch_impl(mctx):
    for mod in mctx.modules:
        for tag in mod.tags.module_proxy:
            module_proxy(name = tag.name, go_mod = tag.go_mod, go_sum = tag.go_sum, go_sdk_root = _GO_SDK_ROOT)
        for tag in mod.tags.test_binaries:
            spec = json.decode(mctx.read(tag.spec))
            for source in spec["sources"]:
                module_files = []
                if source.get("module_dir"):
                    # Files of package //e2e (e2e/binaries has no BUILD file).
                    rel = source["module_dir"].removeprefix("e2e/")
                    module_files = [Label("//e2e:{}/{}".format(rel, f)) for f in ["go.mod", "go.sum"]]
                test_binaries(
                    name = tag.prefix + source["name"],
                    go_sdk_root = _GO_SDK_ROOT,
                    module_files = module_files,
                    source = json.encode(source),
                )

go_fetch = module_extension(
    implementation = _go_fetch_impl,
    tag_classes = {
        "module_proxy": tag_class(attrs = {
            "go_mod": attr.label(mandatory = True),
            "go_sum": attr.label(mandatory = True),
            "name": attr.string(mandatory = True),
        }),
        "test_binaries": tag_class(attrs = {
            "prefix": attr.string(default = "e2e_"),
            "spec": attr.label(mandatory = True),
        }),
    },
    doc = "Go module proxy and e2e test binaries fetched with the Go toolchain (see the file's docstring).",
)
