# kdefer Makefile. The two commands a fresh machine needs:
#   make demo   # run the main job: local cluster + MinIO + kdefer + the physics example
#   make test   # verify, unit, envtest, real S3 and fuzz tiers, then the local-cluster e2e tier,
#               # its smoke subset on the oldest supported Kubernetes (e2e-oldest) and
#               # Kubernetes' own Job and CronJob specs with kdefer arming every Job (e2e-upstream)
SHELL := /usr/bin/env bash
.SHELLFLAGS := -euo pipefail -c
GO ?= go
TOOLS := test/tools/install.sh
BIN := $(CURDIR)/bin
ENVTEST_DIR := $(BIN)/envtest
GOLANGCI_LINT := $(BIN)/golangci-lint
CHART := deploy/helm/kdefer
# A count, not a duration: Go 1.26's coordinator can fail a duration-bounded
# run at its deadline with a spurious "context deadline exceeded" on a loaded
# machine (golang/go#75804; seen here once, FuzzCombineCRC32C).
FUZZTIME ?= 10000x
# One set of compiler flags for every tier and for the images (test/images
# builds with CGO_ENABLED=0 -trimpath). The Go build cache is keyed by them:
# with the same flags, vet, unit, fuzz and the image builds compile each
# dependency once; with different ones a cold machine compiled client-go,
# controller-runtime and the cloud SDKs twice. Nothing in kdefer needs cgo.
# The linker flags leave the cache keys alone: without the symbol table and
# DWARF a test binary links in a quarter less CPU (controller.test: 7.3
# against 9.9 CPU-s, 2026-12-02; the unit tier links ~30 of them each run),
# and nothing here reads either (stack traces use the pclntab). A -ldflags on
# a command line replaces this one. Nor does the compiler write DWARF (what
# -w throws away at the link anyway): a cold build of controller-runtime took
# 222 CPU-s with -dwarf=false against 242 without on an idle machine, one of
# client-go and controller-runtime 247 against 331 beside the tool builds
# (2026-12-02, empty GOCACHE each); a cold `make test` compiles for ~50
# CPU-minutes. test/tools/install.sh, test/e2e/run.sh and test/images pass the same
# -gcflags on their command lines, so their builds share this cache.
export CGO_ENABLED ?= 0
export GOFLAGS ?= -trimpath "-ldflags=-s -w" -gcflags=all=-dwarf=false

# KUBE_VERSION=v1.MINOR.PATCH (any release the Go module proxy serves) runs
# the cluster, envtest and e2e on that Kubernetes; the default is the newest,
# set in $(TOOLS). Each minor has a wrapper module in test/tools/kube.
KUBE_NEWEST_WRAPPER := $(shell ls -d test/tools/kube/v1.* | sort -V | tail -1)
# The oldest release kdefer supports: the release of the oldest wrapper module
# (docs/usage.md "Supported Kubernetes versions" states it; hack/doccheck
# checks that the docs and the chart agree). make test runs e2e-oldest on it.
KUBE_OLDEST := $(shell $(TOOLS) oldest)
export KDEFER_KUBE_DIR = $(shell $(TOOLS) path kube)
export KDEFER_ETCD_DIR = $(shell $(TOOLS) path etcd)
export KDEFER_MINIO = $(shell $(TOOLS) path minio)/minio
export KDEFER_AZURITE = $(shell $(TOOLS) path azurite)/azurite-blob
export KUBEBUILDER_ASSETS = $(ENVTEST_DIR)

.PHONY: all help build kubectl-kdefer krew release test unit fuzz verify lint generate tools tools-oldest tools-e2e-upstream envtest-assets bench-stage bench-scale bench-controller e2e e2e-oldest e2e-upstream e2e-soak demo demo-down fmt

all: build

## help: what each target does, and the tier budget (the ## comments here).
help:
	@sed -n 's/^## \{0,1\}//p' $(firstword $(MAKEFILE_LIST))

build:
	$(GO) build ./...
	$(GO) build -o $(BIN)/ ./cmd/...
	cp $(BIN)/kdefer $(BIN)/kubectl-kdefer

## kubectl-kdefer: the kdefer CLI as a kubectl plugin (the same binary under
## kubectl's plugin name); put bin/ on PATH and run `kubectl kdefer ...`.
kubectl-kdefer:
	$(GO) build -o $(BIN)/kubectl-kdefer ./cmd/kdefer

## tools: build (once, cached by version in ~/.cache/kdefer/tools) what the tests need.
tools:
	$(TOOLS) etcd
	$(TOOLS) minio
	$(TOOLS) azurite
	$(TOOLS) kube
	$(TOOLS) kueue
	$(TOOLS) jobset

## tools-oldest: Kubernetes KUBE_OLDEST and its etcd, for e2e-oldest (cached as tools is).
tools-oldest:
	KUBE_VERSION=$(KUBE_OLDEST) $(TOOLS) etcd
	KUBE_VERSION=$(KUBE_OLDEST) $(TOOLS) kube

## tools-e2e-upstream: Kubernetes' e2e specs of test/e2e/apps (e2e.test) and
## the Ginkgo CLI of KUBE_VERSION, for e2e-upstream (cached as tools is).
tools-e2e-upstream:
	$(TOOLS) kube-e2e

envtest-assets: tools
	mkdir -p $(ENVTEST_DIR)
	ln -sf $(KDEFER_KUBE_DIR)/kube-apiserver $(KDEFER_KUBE_DIR)/kubectl $(ENVTEST_DIR)/
	ln -sf $(KDEFER_ETCD_DIR)/etcd $(ENVTEST_DIR)/

## test: the README's test command; .ci/run calls exactly this (hack/test.sh:
## the tiers below, timed, with the tool builds overlapping verify and fuzz, the
## e2e tier's set-up and multi-node phase overlapping them and the unit tier,
## e2e-oldest after the e2e tier, and a table of seconds per tier at the end). The e2e tier needs root (it
## runs a real kubelet and containerd); KDEFER_SKIP_E2E=1 leaves it out on a
## machine that cannot run it.
##
## Tier budget on the CI machine (2 cores, 24 GiB), measured with hack/test.sh
## on fresh clones (docs/development.md "Tier budget" has the details, where
## the CPU goes and the room left in 90 min):
##   tier      cold (c14 2026-12-03: caches removed)  warm (w40 2026-12-03: tools cached)
##   generate  114 s (controller-gen compiled)        6 s
##   tools     1582 s, in the background              0 s
##   verify    1103 s (overlaps tools)                46 s, beside fuzz and the e2e set-up
##   fuzz      314 s, beside verify                   96 s, beside verify
##   unit      423 s (multi-node phase alongside)     266 s (multi-node phase alongside)
##   e2e       625 s after the tools                  585 s after the tools (189 after unit)
##   total     2208 s = 36.8 min                      593 s = 9.9 min
##   e2e-oldest (after c14/w40; measured alone 2026-12-04, loaded machine): warm
##             183 s at the end (envtest 69 s, smoke 111 s), 71 CPU-s;
##             cold adds Kubernetes v1.34.4 and etcd to the tools, ~690 CPU-s
##             (empty Go build cache), so cold ~47 min by estimate.
##   e2e-upstream (after e2e-oldest; measured alone 2026-12-04, loaded machine):
##             warm 224 s at the end (the specs with kdefer 188 s), 35 CPU-s;
##             cold adds e2e.test to the tools (~100 CPU-s) and the baseline
##             run without kdefer (438 s, 44 CPU-s with it), so cold ~55 min,
##             warm ~15 min by estimate.
test:
	hack/test.sh

## unit: go test of every package; real MinIO, Azurite and a real apiserver are required
## (KDEFER_REQUIRE_TOOLS=1 turns a missing tool into a failure, not a skip).
unit:
	KDEFER_REQUIRE_TOOLS=1 $(GO) test -count=1 -timeout 30m ./...

## fuzz: a short run of every fuzz target, each package's test binary built
## once (FUZZTIME=500000x for a longer one).
fuzz:
	hack/fuzz.sh $(FUZZTIME)

generate:
	$(GO) tool controller-gen object:headerFile=hack/boilerplate.go.txt paths=./api/...
	$(GO) tool controller-gen crd:allowDangerousTypes=false paths=./api/... output:crd:dir=deploy/crd
	$(GO) tool controller-gen rbac:roleName=kdefer-manager paths=./controller/... output:rbac:dir=deploy/rbac
	$(GO) tool controller-gen rbac:roleName=kdefer-node paths=./cmd/kdefer-controller/app/... output:rbac:dir=deploy/node-agent
	@# The chart's pre-delete hook (uninstall.Run): its own narrow role, not
	@# part of deploy/ (kubectl kdefer uninstall runs with the user's rights).
	$(GO) tool controller-gen rbac:roleName=kdefer-uninstall paths=./uninstall/... output:rbac:dir=deploy/uninstall
	@# docs/api.md, the API reference, from the same types and comments as the
	@# CRDs: crd-ref-docs, pinned by its own module in hack/tools/crd-ref-docs
	@# (with its config and templates) and cached by `go tool`.
	$(GO) -C hack/tools/crd-ref-docs tool crd-ref-docs --log-level=warn --renderer=markdown \
		--source-path=$(CURDIR)/api/v1alpha1 --config=$(CURDIR)/hack/tools/crd-ref-docs/config.yaml \
		--templates-dir=$(CURDIR)/hack/tools/crd-ref-docs/templates --output-path=$(CURDIR)/docs/api.md
	@# The Helm chart ships deploy/'s manifests as files it reads, not copies
	@# it edits: one source of truth (test/helmchart checks the chart renders
	@# what kustomize builds). Only what the chart parameterizes beyond the
	@# namespace (the Deployment, Services) is a template of its own.
	rm -rf $(CHART)/files
	for d in crd rbac webhook policy critical-pods monitoring node-agent uninstall; do mkdir -p $(CHART)/files/$$d; \
		cp $$(ls deploy/$$d/*.yaml | grep -v -e kustomization.yaml -e daemonset.yaml) $(CHART)/files/$$d/; done
	@# The chart's values.schema.json (helm install, upgrade, template and lint
	@# refuse values of the wrong type or a key the chart does not know) and
	@# README.md (the values table) from values.yaml's comments:
	@# helm-values-schema-json and helm-docs, each pinned by its own module in
	@# hack/tools (as crd-ref-docs is) and cached by `go tool`.
	$(GO) -C hack/tools/helm-schema tool helm-values-schema-json --config=config.yaml \
		--values=$(CURDIR)/$(CHART)/values.yaml --output=$(CURDIR)/$(CHART)/values.schema.json >/dev/null
	$(GO) -C hack/tools/helm-docs tool helm-docs --log-level=warning --sort-values-order=file \
		--chart-search-root=$(CURDIR)/$(CHART) --template-files=$(CURDIR)/hack/tools/helm-docs/README.md.gotmpl

## verify: generated code, manifests and docs/api.md are committed and current; code is
## formatted, vetted and linted (golangci-lint with .golangci.yml, as `make lint`;
## its govet is go vet's analyzers, over the e2e-tagged files too).
## GENERATED=1 skips the regeneration (make test runs `make generate` first,
## before the e2e tier reads the tree beside verify). UNIT=1 leaves out the
## checks that are tests of ./... (make test's unit tier runs them all; run
## here too, each was a second link and run of its package's tests).
verify: $(if $(filter 1,$(GENERATED)),,generate) lint
	@test -z "$$(gofmt -l $$(git ls-files '*.go'))" || { echo "gofmt needed:"; gofmt -l $$(git ls-files '*.go'); exit 1; }
ifneq ($(UNIT),1)
	@# deploy/rbac's hand-written rules (resourceNames) against the code they serve
	$(GO) test -count=1 -run '^TestWebhookConfigurationRBAC$$' ./controller/certs
	@# helm lint and helm template of deploy/helm/kdefer, in-process (helm's Go
	@# packages: no helm binary to build), against kustomize's build of deploy/
	$(GO) test -count=1 ./test/helmchart
	@# every example the README names, as `kdefer lint -f examples/ -R` sees
	@# it (the CLI in-process): exit 0 and not one warning
	$(GO) test -count=1 -run '^TestLintExamples$$' ./cmd/kdefer
	@# every link in README.md and docs/ resolves to a file and heading, every
	@# doc and section named in code and CRD descriptions exists, and the user
	@# docs carry no issue numbers nor links out of the repository
	$(GO) test -count=1 ./hack/doccheck
endif
	@# The newest Kubernetes wrapper module and MinIO's on kdefer's versions of
	@# every module both builds compile, so the tool builds reuse kdefer's build
	@# cache (a kdefer bump without `test/tools/kube/shared.sh align DIR` fails here).
	test/tools/kube/shared.sh check $(KUBE_NEWEST_WRAPPER)
	test/tools/kube/shared.sh check test/tools/minio
	@git diff --exit-code -- api deploy docs/api.md || { echo "generated files are stale: run 'make generate' and commit"; exit 1; }
	@test -z "$$(git status --porcelain -- api deploy docs/api.md)" || { echo "untracked generated files: run 'make generate' and commit"; git status --porcelain -- api deploy docs/api.md; exit 1; }

## lint: golangci-lint with .golangci.yml (govet, staticcheck, errcheck, revive,
## goimports, misspell, unparam, and kube-api-linter for api/), run by
## hack/lint.sh at one path for every clone, so a fresh clone reuses the
## analysis cache of the clones before it (golangci-lint keys it by path).
lint: $(GOLANGCI_LINT)
	hack/lint.sh $(GOLANGCI_LINT)

## bin/golangci-lint: golangci-lint v2 with kube-api-linter compiled in, pinned
## by hack/tools/go.mod (a module of its own, so its dependencies never move
## kdefer's) and built from the Go module proxy; rebuilt only when
## hack/tools/go.sum changes (~3 CPU-minutes).
$(GOLANGCI_LINT): hack/tools/go.mod hack/tools/go.sum
	$(GO) -C hack/tools build -o $(GOLANGCI_LINT) sigs.k8s.io/kube-api-linter/cmd/golangci-lint-kube-api-linter

fmt:
	gofmt -w $$(git ls-files '*.go')

## bench-stage: kdefer-stage against s5cmd and mc on one local server (not part of make test):
## BENCH_STAGE_SERVER=minio (default; writes test/bench/results.md; MinIO's own CPU and disk waits bound
## most cells on 2 cores, test/bench/stage-runs.md) or versitygw (its posix gateway, a fraction of MinIO's CPU a
## request, so the clients' own differences show; writes test/bench/results-versitygw.md).
BENCH_STAGE_SERVER ?= minio
bench-stage:
	$(if $(filter minio,$(BENCH_STAGE_SERVER)),$(TOOLS) minio)
	$(TOOLS) mc
	$(TOOLS) s5cmd
	$(GO) run ./test/bench/stage -server $(BENCH_STAGE_SERVER)

## bench-scale: a BENCH_SCALE-file (default 1,000,000) empty-file stage-out by kdefer-stage alone under the
## defer pod's memory limit, objects counted in the server afterwards: the proof that memory does not grow
## with the file count (not part of bench-stage).
## BENCH_SCALE_SERVER=versitygw (default: its posix gateway, linked into the benchmark, no tool to build;
## ~1.3 ms of client+server CPU a file, ~25 minutes at a million on 2 idle cores) or minio (~3.5 ms a file,
## mostly MinIO's, over an hour).
BENCH_SCALE ?= 1000000
BENCH_SCALE_SERVER ?= versitygw
bench-scale:
	$(if $(filter minio,$(BENCH_SCALE_SERVER)),$(TOOLS) minio)
	$(GO) run ./test/bench/stage -scale $(BENCH_SCALE) -scale-server $(BENCH_SCALE_SERVER)

## bench-controller: 10,000 managed pods on a real apiserver, then 1,000 pods
## on 100 simulated nodes; each burst p99 also as a ratio to a bare client's
## floor measured in the same run (not part of make test).
bench-controller: envtest-assets
	$(GO) build -o $(BIN)/bench-controller ./test/bench/controller
	$(BIN)/bench-controller
	$(BIN)/bench-controller -nodes 100 -pods 1000 -burst 1000 -unmanaged 0 -steady-for 0

## images: the local cluster's images as tarballs under bin/images; with
## REGISTRY=host:port[/path], kdefer's two images pushed there instead, one
## OCI index per image for PLATFORMS (default linux/amd64,linux/arm64),
## tagged with the build's version (git describe), reproducible (same commit,
## same digests) and OCI-annotated; bin/images/NAME.pushed holds REF@DIGEST.
PLATFORMS ?= linux/amd64,linux/arm64
images:
	$(GO) run ./test/images --out $(BIN)/images $(if $(REGISTRY),--push $(REGISTRY) --platforms $(PLATFORMS) --ref-dir $(BIN)/images)

## krew: the kubectl plugin's release archives (kubectl-kdefer and LICENSE for
## linux and darwin, amd64 and arm64; reproducible) and the krew manifest that
## names them with their SHA-256, in bin/krew: make krew VERSION=vX.Y.Z.
krew:
	$(if $(VERSION),,$(error VERSION=vX.Y.Z: the release the archives are for))
	$(GO) run ./hack/krew --version $(VERSION) --out $(BIN)/krew

## release: a release of VERSION (vX.Y.Z[-PRE]) to REGISTRY (host[:port]/path),
## what .github/workflows/release.yml runs on a tag (hack/release): kdefer's
## images for PLATFORMS pushed, each with an SBOM and a cosign signature
## (KEY=cosign.key, default bin/release/cosign.key, made when missing;
## KEYLESS=1 leaves signing to cosign), the chart pushed to
## oci://REGISTRY/charts/kdefer, and in bin/release manifests.yaml, the krew
## archives and manifest, the CHANGELOG section and release.txt (every
## artifact with its digest).
release:
	$(if $(and $(REGISTRY),$(VERSION)),,$(error make release REGISTRY=host[:port]/path VERSION=vX.Y.Z))
	$(GO) run ./hack/release --registry $(REGISTRY) --version $(VERSION) --platforms $(PLATFORMS) \
		$(if $(KEY),--key $(KEY)) $(if $(filter 1,$(KEYLESS)),--keyless)

## cluster-up / cluster-down: a real Kubernetes cluster on this machine (NODES=3: three nodes).
cluster-up: tools
	test/cluster/cluster.sh up $(if $(NODES),--nodes $(NODES))

cluster-down:
	test/cluster/cluster.sh down

## e2e: the trigger matrix on the local cluster with real containers and MinIO
## (one cluster of three nodes: the scenarios written for one node on the
## first, those that disrupt a node beside them on the others, then the
## TestMultiNode scenarios on all three).
e2e: tools
	test/e2e/run.sh

## e2e-oldest: the e2e tier's smoke subset on the oldest supported release
## (KUBE_OLDEST), on a cluster of its own: the Job webhook and a defer pod
## (TestSucceeded), the admission policy that guards work volumes from the
## garbage collector (TestJobDeletedForeground), a drain through the Eviction
## API with the defer pod's budget and the node agent's logs (TestDrain, on
## the third node), the CronJob webhook's matchConditions (TestCronJob) and a
## namespace's default DeferPolicy refusing a Job (TestNamespaceDefaultPolicy),
## side by side. First ./test/envtest on that release's apiserver and etcd
## (bin/envtest-oldest): kdefer's manifests applied as they ship, both
## admission policies, the webhooks, Pod Security, least-privilege RBAC
## (~35 CPU-s). kdefer is installed as the README's second way, `kubectl apply
## --server-side -f manifests.yaml` of a release to the test registry (the e2e
## tier installs the released chart with helm). make test runs it after the e2e tier.
## e2e-upstream: Kubernetes' own e2e specs of Job, CronJob and TTLAfterFinished
## (KUBE_VERSION's test/e2e/apps, default-cluster specs only) on a local
## cluster of one node, without kdefer (the baseline, cached by release in
## ~/.cache/kdefer/e2e-upstream) and with kdefer arming every Job of the specs'
## namespaces (test/upstream/arm-kdefer.yaml); red when a spec green in the
## baseline is not green with kdefer (test/upstream/run.sh). make test runs it
## after e2e-oldest.
e2e-upstream: tools tools-e2e-upstream
	test/upstream/run.sh

E2E_OLDEST_TESTS := TestSucceeded|TestJobDeletedForeground|TestDrain|TestCronJob|TestNamespaceDefaultPolicy
e2e-oldest: tools tools-oldest
	mkdir -p $(BIN)/envtest-oldest
	k=$$(KUBE_VERSION=$(KUBE_OLDEST) $(TOOLS) path kube) e=$$(KUBE_VERSION=$(KUBE_OLDEST) $(TOOLS) path etcd) && \
		ln -sf $$k/kube-apiserver $$k/kubectl $$e/etcd $(BIN)/envtest-oldest/
	KUBEBUILDER_ASSETS=$(BIN)/envtest-oldest KDEFER_REQUIRE_TOOLS=1 $(GO) test -count=1 ./test/envtest
	KUBE_VERSION=$(KUBE_OLDEST) KDEFER_E2E_INSTALL=manifests KDEFER_E2E_PHASES=single KDEFER_E2E_FLAGS='-run ^($(E2E_OLDEST_TESTS))$$' test/e2e/run.sh

## e2e-soak: the e2e tier N times on one cluster (default 5), then a table of
## scenario x run (seconds, or FAIL); red if any run failed. No retries.
N ?= 5
e2e-soak: tools
	KDEFER_E2E_RUNS=$(N) test/e2e/run.sh

## demo: the README's main job; demo-down removes everything it started.
demo: tools
	test/demo/run.sh

demo-down:
	test/demo/run.sh down
