"""Macros for the shapes the BUILD files of this repository repeat.

- `go_srcs`: the files `go build` reads in a package, for the actions that
  run `go build` themselves (the operator's compile actions through
  //:operator_srcs, the catalog image's health probe).
- `isctl_compile` and `isctl_image`: the Go-native build's steps run as
  Bazel actions (`isctl bazel-compile`, `isctl bazel-image`; see
  docs/bazel.md), so each image's BUILD file states only its inputs.
"""

load("@bazel_lib//lib:run_binary.bzl", "run_binary")

# The Go that compiles (go.mod's toolchain line) and the module proxy the
# compile actions build offline from.
_GO_TOOLCHAIN = [
    "@go_sdk//:bin/go",
    "@go_sdk//:files",
    "@operator_go_modules//:proxy",
    "@operator_go_modules//:proxy/ROOT",
]

# The operator binaries every image step takes (//operator compiles them):
# the operator image packages them, the bundle's CSV and the catalog pin
# the operator image built from them.
_OPERATOR_BINARIES = {
    "linux/amd64": "//operator:operator_linux_amd64",
    "linux/arm64": "//operator:operator_linux_arm64",
}

def go_srcs(name, embeds = False, srcs = [], visibility = ["//:__pkg__"]):
    """The files `go build` reads in this package, tests excluded.

    Args:
      name: the filegroup's name (go_srcs by convention).
      embeds: also the package's other files (what //go:embed reads),
        testdata/ and the BUILD file excluded.
      srcs: files besides the package's own, e.g. an embedded file gazelle
        lists in embedsrcs.
      visibility: who reads them; by default //:operator_srcs.
    """
    if embeds:
        files = native.glob(
            ["**"],
            exclude = [
                "**/*_test.go",
                "BUILD.bazel",
                "testdata/**",
            ],
        )
    else:
        files = native.glob(["*.go"], exclude = ["*_test.go"])
    native.filegroup(
        name = name,
        srcs = files + srcs,
        visibility = visibility,
    )

def isctl_compile(name, out, platform, inputs, mnemonic, progress_message, program = None, **kwargs):
    """One `go build`, as `isctl build` compiles (isctl bazel-compile).

    Offline, with the Go SDK of go.mod's toolchain line and the module proxy
    fetched from go.sum.

    Args:
      name: the target.
      out: the binary, relative to the package.
      platform: os/arch.
      inputs: the files the build reads (go.mod, go.sum, sources, stamp),
        passed to the step in this order.
      mnemonic: the action's mnemonic.
      progress_message: the action's progress message.
      program: a catalog image program (-program); the operator if None.
      **kwargs: passed to run_binary (stamp, visibility).
    """
    run_binary(
        name = name,
        srcs = inputs + _GO_TOOLCHAIN,
        outs = [out],
        args = ["bazel-compile"] + (["-program=" + program] if program else []) + [
            "-platform=" + platform,
            "-go=$(execpath @go_sdk//:bin/go)",
            "-goproxy=$(execpath @operator_go_modules//:proxy/ROOT)",
            "-out=$(execpath %s)" % out,
        ] + ["$(execpaths %s)" % i for i in inputs],
        mnemonic = mnemonic,
        progress_message = progress_message,
        tool = "//tools/cmd/isctl",
        **kwargs
    )

def isctl_image(name, image, inputs, mnemonic, progress_message, catalog_binaries = [], **kwargs):
    """An image as an OCI layout directory, by the project's assembly (isctl bazel-image).

    The step takes the operator binaries compiled by //operator, the
    registry of --//:registry and the stamp, and writes the layout to the
    directory `name`.

    Args:
      name: the target, and the output directory.
      image: operator, bundle or catalog.
      inputs: the files the step reads (//:stamp_inputs for the operator,
        //:build_inputs for the others).
      mnemonic: the action's mnemonic.
      progress_message: the action's progress message.
      catalog_binaries: the catalog image's programs, (name, label) pairs
        in the order the step is given them.
      **kwargs: passed to run_binary (visibility).
    """
    run_binary(
        name = name,
        srcs = _OPERATOR_BINARIES.values() + [b for _, b in catalog_binaries] + inputs,
        args = ["bazel-image", "-image=" + image] +
               ["-binary=%s=$(execpath %s)" % (p, b) for p, b in _OPERATOR_BINARIES.items()] +
               ["-catalog-binary=%s=$(execpath %s)" % (n, b) for n, b in catalog_binaries] +
               ["-out=$(RULEDIR)/" + name] + select({
            "//:local_registry": ["-registry=localhost:5000/tytn"],
            "//conditions:default": ["-registry=docker.io/tytn"],
        }) + ["$(execpaths %s)" % i for i in inputs],
        mnemonic = mnemonic,
        out_dirs = [name],
        progress_message = progress_message,
        stamp = -1,
        tool = "//tools/cmd/isctl",
        **kwargs
    )
