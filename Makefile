# kfaws developer entry points. `make demo` and `make test` work on a fresh
# machine: every prerequisite is installed by the targets themselves into
# caches outside the clone ($(KFAWS_CACHE)), reused by later runs.

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
.DEFAULT_GOAL := help

KFAWS_CACHE ?= $(HOME)/.cache/kfaws
export KFAWS_CACHE
# One target directory outside the clone, shared by builds, tests, CI and benches.
export CARGO_TARGET_DIR ?= $(KFAWS_CACHE)/target
CARGO ?= cargo
WITH_EMULATOR := tests/emulator/with_emulator.sh
# python3-venv only where python3 cannot make virtualenvs by itself (Debian's
# python3 without it; pyenv builds can).
PY_VENV_PKG := $(shell python3 -c 'import venv, ensurepip' 2>/dev/null || echo python3-venv)
# dataset-fashion-mnist: real Fashion-MNIST for the trainer's tests and the demo;
# skopeo: reads the images `kfaws image build` writes (tests/image.rs);
# docker-registry + apache2-utils (htpasswd, bcrypt): the emulator's loopback
# registry behind ECR, which `kfaws image push` pushes to (tests/image_push.rs).
DEBIAN_PACKAGES := ca-certificates curl jq unzip util-linux procps skopeo docker-registry apache2-utils dataset-fashion-mnist $(PY_VENV_PKG)

.PHONY: help deps build test fmt-check clippy test-rust test-emulator test-apiserver demo sandbox bench

help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | sed 's/:.*## /\t/'

deps: ## Debian packages the tests and the demo need (installs only what is missing)
	tests/debian-packages.sh $(DEBIAN_PACKAGES)

build: ## build the kfaws and kfaws-trainer binaries
	$(CARGO) build --workspace --bins

test: deps fmt-check clippy test-emulator test-apiserver test-rust ## formatting, clippy -D warnings and every test
	@echo "make test: all checks passed"

fmt-check: ## rustfmt in check mode
	$(CARGO) fmt --all -- --check

clippy: ## clippy on every target, warnings denied
	$(CARGO) clippy --workspace --all-targets -- -D warnings

test-emulator: deps build ## the AWS emulator's own tests (each patch against real-AWS behaviour; the SageMaker runner's also run the built trainer)
	tests/emulator/run_tests.sh

test-apiserver: deps ## build kube-apiserver and etcd from the Go module proxy (cached) and smoke-test the harness
	tests/apiserver/smoke.sh

test-rust: deps ## unit, engine and end-to-end tests (against the AWS emulator and the API server harness)
	bin="$$(tests/apiserver/build.sh | tail -n1)"; \
	KFAWS_TESTENV_BIN="$$bin" $(WITH_EMULATOR) $(CARGO) test --workspace

demo: deps build ## the main job on the embedded default: plan, apply, image push, data-parallel training as a PyTorchJob and a SageMaker job, endpoint, destroy
	$(WITH_EMULATOR) tests/demo.sh

sandbox: deps build ## an interactive shell with the AWS emulator and a local EKS cluster, to drive kfaws by hand
	$(WITH_EMULATOR) tests/sandbox.sh

bench: deps build ## benchmarks: engine (plan time, apply vs critical path), vanilla apply/destroy under the emulator's latencies, manifest apply vs kubectl, trainer (vs PyTorch, DDP scaling, latency), trainer image size vs the AWS PyTorch image
	$(CARGO) bench --workspace --bench engine
	KFAWS_BIN=$(CARGO_TARGET_DIR)/debug/kfaws KFAWS_TESTENV_BIN=$$(tests/apiserver/build.sh | tail -n1) $(WITH_EMULATOR) $(CARGO) bench --workspace --bench vanilla
	KFAWS_TESTENV_BIN=$$(tests/apiserver/build.sh | tail -n1) $(CARGO) bench --workspace --bench k8s_apply
	trainer/bench/run.sh
	benches/image.sh
