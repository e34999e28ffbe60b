#!/usr/bin/env bash
# Workspace status for `bazel build --config=release` (see .bazelrc): stable
# keys that operator/BUILD.bazel stamps into the binary with x_defs.
set -euo pipefail
echo "STABLE_VERSION $(tr -d '[:space:]' < VERSION)"
echo "STABLE_GIT_COMMIT $(git rev-parse HEAD 2>/dev/null || echo unknown)"
