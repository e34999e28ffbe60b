# Go-native image build, push and release (the build of record; see
# tools/README.md). Included from the root Makefile (`include tools/tools.mk`);
# also usable alone: `make -f tools/tools.mk images`.
#
#   make images   [REGISTRY=...] [CHANNELS=stable,fast] [PLATFORMS=...] [CATALOG=full|current]
#   make push     [REGISTRY=...] [SIGN_KEY=cosign.key]   # builds, then pushes operator, bundle, catalog
#   make release  REGISTRY=... [SIGN_KEY=cosign.key]    # from a clean commit: build, push, record in catalog/, push catalog
#   make verify-release [VERIFY_CATALOG=<catalog image> VERIFY_KEY=cosign.pub]
#                                     # rebuild recorded releases from their commits, compare digests;
#                                     # with VERIFY_CATALOG, verify a published catalog image by image
#   make bench-images                 # cold and no-op `make images` in a clean clone, image sizes
#   make test-tools                   # the tests of the image tools
#
# Images are reproducible: SOURCE_DATE_EPOCH (default 0) is the only time
# they record.

# isctl needs no build tag. The tests do, for one comparison with opm's
# renderer (operator-registry's alpha/action wants it when cgo is off).
ISCTL_TEST_TAGS ?= containers_image_openpgp
ISCTL      ?= bin/isctl

VERSION   ?= $(shell cat VERSION 2>/dev/null)
REGISTRY  ?= docker.io/tytn
CHANNELS  ?= stable,fast
PLATFORMS ?= linux/amd64,linux/arm64
# full: template + released bundles + this build's bundle (what is released);
# current: only this build's bundle (development clusters without access to
# the registry holding the released bundles).
CATALOG   ?= full

# A cosign private key (isctl keygen, or cosign generate-key-pair) signs the
# pushed images and attests their SBOM and provenance; its password comes
# from $COSIGN_PASSWORD. Without it nothing is signed.
SIGN_KEY  ?=
# isctl verify -catalog: a published catalog image and the public key.
VERIFY_CATALOG ?=
VERIFY_KEY     ?=

ISCTL_BUILD_FLAGS = --registry=$(REGISTRY) --version=$(VERSION) --channels=$(CHANNELS)
ISCTL_SIGN_FLAGS  = $(if $(SIGN_KEY),--sign-key=$(SIGN_KEY))

.PHONY: isctl images push release verify-release bench-images test-tools

# Always run: `go build` is a no-op (and does not relink) when nothing changed.
isctl: ## Build the image tool into bin/isctl.
	@go build -o $(ISCTL) ./tools/cmd/isctl

images: isctl ## Build the operator, bundle and catalog images into out/images (digests in out/images/digests.txt).
	$(ISCTL) build $(ISCTL_BUILD_FLAGS) --platforms=$(PLATFORMS) --catalog=$(CATALOG)

push: images ## Build, then push operator, bundle and catalog (with SBOM, provenance; signed with SIGN_KEY) to REGISTRY.
	$(ISCTL) push $(ISCTL_SIGN_FLAGS)

release: isctl ## From a clean commit: build, push, record the release in catalog/, push the catalog.
	$(ISCTL) release $(ISCTL_BUILD_FLAGS) $(ISCTL_SIGN_FLAGS)

verify-release: isctl ## Rebuild every recorded release and compare digests; VERIFY_CATALOG= VERIFY_KEY= verifies a published catalog.
	$(ISCTL) verify $(if $(VERIFY_CATALOG),--catalog=$(VERIFY_CATALOG) --key=$(VERIFY_KEY))

bench-images: isctl ## Time a cold and a no-op `make images` in a clean clone; image sizes.
	$(ISCTL) bench --cold-go-cache=$(if $(filter 0 false no,$(BENCH_COLD_GO_CACHE)),false,true)

test-tools: ## Tests of the image tools (-short skips the end-to-end ones).
	go test -tags $(ISCTL_TEST_TAGS) ./tools/cmd/isctl/... ./internal/...
