#!/usr/bin/env bash
# Workspace status for `bazel build --config=release` (see .bazelrc): stable
# keys that operator/BUILD.bazel stamps into the go_binary with x_defs, and
# that the image steps (isctl bazel-compile, bazel-image) stamp into the
# operator image and the labels. STABLE_GIT_COMMIT is the revision exactly
# as the Go-native build computes it (internal/srctree): the commit of HEAD,
# with -dirty appended when tracked files are modified or untracked files
# are not ignored, or "unknown" outside a git work tree.
set -euo pipefail
echo "STABLE_VERSION $(tr -d '[:space:]' < VERSION)"
if commit=$(git rev-parse --verify --quiet 'HEAD^{commit}' 2>/dev/null) && [ -n "$commit" ]; then
  if [ -n "$(git status --porcelain --untracked-files=normal 2>/dev/null)" ]; then
    commit="$commit-dirty"
  fi
else
  commit=unknown
fi
echo "STABLE_GIT_COMMIT $commit"
