# Static verification of the Bazel layer (MODULE.bazel, .bazelrc, BUILD
# files, the hosted CI workflow). Included from the root Makefile; `make
# test` runs `bazel-check`. Bazel itself is not needed (nor available here):
# every tool runs pinned through `go run module/cmd@version` and needs only
# the Go module proxy. See docs/bazel.md.

# Same gazelle as MODULE.bazel's bazel_dep (bazelcheck verifies that);
# v0.54.0 does not compile from the proxy's zip.
BAZEL_GAZELLE_VERSION := v0.53.0
BAZEL_GAZELLE := github.com/bazelbuild/bazel-gazelle/cmd/gazelle@$(BAZEL_GAZELLE_VERSION)
# buildtools publishes pseudo-versions only; this is the one gazelle v0.53.0
# builds with (newer ones need an unpinned golang.org/x/sys lookup).
BAZEL_BUILDIFIER := github.com/bazelbuild/buildtools/buildifier@v0.0.0-20250930140053-2eb4fccefb52
BAZEL_ACTIONLINT := github.com/rhysd/actionlint/cmd/actionlint@v1.7.12

# Starlark files of the Bazel graph (outputs, caches and nested modules
# excluded, as in .bazelignore and the gazelle:exclude directives).
BAZEL_STARLARK_FILES = $(shell find . \( -path ./.git -o -path ./.cache -o -path ./out -o -path ./bin \
	-o -path ./e2e/binaries -o -path ./tools/bazelcheck/testdata -o -name 'bazel-*' \) -prune -o \
	\( -name BUILD.bazel -o -name BUILD -o -name MODULE.bazel -o -name '*.bzl' \) -print | LC_ALL=C sort)

.PHONY: bazel-check
bazel-check: ## Verify the Bazel files statically: gazelle diff, buildifier, bazelcheck, go_deps' generated BUILD files, actionlint.
	@set -u; failed=""; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  go run ./tools/bazelcheck repo-config > "$$tmp/WORKSPACE" || exit 1; \
	  echo "bazel-check: gazelle -mode=diff ($(BAZEL_GAZELLE_VERSION))"; \
	  go run $(BAZEL_GAZELLE) -repo_root=. -bzlmod -repo_config="$$tmp/WORKSPACE" -build_file_name=BUILD.bazel -mode=diff \
	    || { echo "BUILD files are stale: run 'make bazel-gazelle' (or 'bazel run //:gazelle')" >&2; failed="$$failed gazelle"; }; \
	  echo "bazel-check: buildifier --mode=check --lint=warn"; \
	  go run $(BAZEL_BUILDIFIER) --mode=check --lint=warn $(BAZEL_STARLARK_FILES) \
	    || { echo "run 'make bazel-fmt' to format, then fix the lint warnings" >&2; failed="$$failed buildifier"; }; \
	  echo "bazel-check: bazelcheck"; \
	  go run ./tools/bazelcheck -gazelle-version=$(BAZEL_GAZELLE_VERSION) || failed="$$failed bazelcheck"; \
	  echo "bazel-check: go-deps (the BUILD files go_deps generates for the Go modules, by gazelle $(BAZEL_GAZELLE_VERSION))"; \
	  { GOBIN="$$tmp/bin" go install $(BAZEL_GAZELLE) && \
	    go run ./tools/bazelcheck -gazelle-version=$(BAZEL_GAZELLE_VERSION) -gazelle="$$tmp/bin/gazelle" -work="$$tmp/go-deps" go-deps; } \
	    || failed="$$failed go-deps"; \
	  echo "bazel-check: actionlint"; \
	  go run $(BAZEL_ACTIONLINT) -shellcheck= -pyflakes= $(wildcard .github/workflows/*.yaml .github/workflows/*.yml) \
	    || failed="$$failed actionlint"; \
	  if [ -n "$$failed" ]; then echo "bazel-check failed:$$failed" >&2; exit 1; fi

.PHONY: bazel-gazelle
bazel-gazelle: ## Regenerate the Go rules of every BUILD.bazel (what `bazel run //:gazelle` does).
	@set -eu; tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  go run ./tools/bazelcheck repo-config > "$$tmp/WORKSPACE"; \
	  go run $(BAZEL_GAZELLE) -repo_root=. -bzlmod -repo_config="$$tmp/WORKSPACE" -build_file_name=BUILD.bazel

.PHONY: bazel-fmt
bazel-fmt: ## Format the Starlark files with buildifier.
	go run $(BAZEL_BUILDIFIER) --mode=fix --lint=fix $(BAZEL_STARLARK_FILES)
