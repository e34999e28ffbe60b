# The Go-native build of record. `make help` lists the targets.
SHELL := /usr/bin/env bash
.DEFAULT_GOAL := help

VERSION := $(shell cat VERSION)
# Plain `go build/vet/test ./...` need no tag. This one adds the test that
# compares the catalog renderer with opm's own (internal/catalog):
# operator-registry's alpha/action needs it when cgo is off.
GO_TAGS := containers_image_openpgp
export CGO_ENABLED := 0
DEMO_DIR ?= .cache/demo
# e.g. --cluster=kind, or --kubeconfig=K --registry=R for an existing cluster
DEMO_FLAGS ?=
TEST_TIMEOUT ?= 80m

.PHONY: help
help: ## Show the targets.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: demo
demo: ## Main job: images → local cluster with GPU nodes + OLM v1 → catalog chart → operator → GPU stacks.
	go run ./e2e/cmd/demo up --dir $(DEMO_DIR) $(DEMO_FLAGS)

.PHONY: down
down: ## Stop what `make demo` started (OLM, registry, operator, cluster).
	go run ./e2e/cmd/demo down --dir $(DEMO_DIR)

.PHONY: test
test: lint bazel-check ## Run every test (first run builds the local cluster's binaries, 6-15 min).
	go test -tags $(GO_TAGS) -timeout $(TEST_TIMEOUT) ./...

.PHONY: lint
lint: ## gofmt and go vet.
	@unformatted=$$(gofmt -l $$(git ls-files '*.go')); \
	  if [ -n "$$unformatted" ]; then echo "gofmt needed:"; echo "$$unformatted"; exit 1; fi
	go vet -tags $(GO_TAGS) ./...

.PHONY: generate
generate: ## Regenerate every derived file: CRD, deepcopy, RBAC (and the catalog chart's copy), values.schema.json.
	go run ./tools/generate

.PHONY: operator
operator: ## Build the operator binary into bin/.
	go build -trimpath -o bin/operator ./operator

# e.g. BENCH_FLAGS="--stacks 50 --reps 1 --own -1 --idle 1m" for a quick look
BENCH_FLAGS ?=

.PHONY: bench
bench: ## This operator vs the stock helm-operator vs the API write floor (~1 h; a report, not a test).
	go run ./e2e/cmd/operatorbench $(BENCH_FLAGS)

.PHONY: bench-curve
bench-curve: ## The burst and restart at 200 (three times), 1000 and 2000 stacks (once); the stock operator up to 1000 (~75 min).
	go run ./e2e/cmd/operatorbench --sizes 200,1000,2000 --stock-max-stacks 1000 --reps 1 --first-reps 3 --floor-after --own -1 --idle 1m $(BENCH_FLAGS)

include tools/tools.mk
include bazel.mk
