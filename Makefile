# llmops.sglang — every entry point a developer, CI or a user needs.
#   make demo    set up, boot a simulated 8 x RTX PRO 6000 node, run site.yml on it, show the result
#   make test    set up, lint, ansible-test sanity, then node tests, other tests and molecule in 4 streams (.ci/run)
#   make quick   lint + unit tests only (seconds; for iterating)
#   make test-builds  the molecule scenario that builds four real SGLang trees (after make test in .ci/run)
SHELL := /bin/bash
.SHELLFLAGS := -eu -o pipefail -c
.DEFAULT_GOAL := help

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
export PATH := $(CURDIR)/$(BIN):$(PATH)
export ANSIBLE_CONFIG := $(CURDIR)/ansible.cfg
# This checkout is the collection: never let a copy that molecule/ansible-compat installs under ~/.ansible shadow it.
export ANSIBLE_COLLECTIONS_PATH := $(CURDIR)
# Where the simulated nodes keep their cached image and runtime state (see sim/README.md).
export SIM_CACHE ?= /var/cache/llmops-sim
export SIM_STATE ?= /run/llmops-sim

HOST_PKGS := debootstrap systemd-container tinyproxy openssh-client dpkg-dev apt-utils gnupg iproute2 git nftables
SCENARIOS ?= $(patsubst molecule/%/molecule.yml,%,$(wildcard molecule/*/molecule.yml))

docs: venv
	python scripts/role-docs.py

.PHONY: docs help setup host-packages venv lint unit quick molecule test test-run test-builds demo demo-down sim-clean sanity lock bench
.PHONY: bench-downloads

help:
	@sed -n '1,5p' Makefile | sed 's/^# \{0,1\}//'
	@echo "Other targets: setup lint unit molecule demo-down sim-clean sanity bench lock toolchain-check test-example test-offline changelog ee-context"

setup: host-packages venv ## idempotent: installs only what is missing

host-packages:
	@missing=(); for p in $(HOST_PKGS); do dpkg-query -W -f='$${Status}' "$$p" 2>/dev/null | grep -q 'ok installed' || missing+=("$$p"); done; \
	if (( $${#missing[@]} )); then \
	  if [ "$$(id -u)" -ne 0 ]; then echo "setup: the simulated nodes need root and these packages: $${missing[*]}" >&2; exit 1; fi; \
	  echo "setup: installing host packages: $${missing[*]}"; \
	  apt-get update -q >/dev/null; \
	  DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "$${missing[@]}" >/dev/null; \
	else echo "setup: host packages present"; fi

venv: $(VENV)/.installed

$(VENV)/.installed: requirements.txt
	@$(PYTHON) scripts/check-python.py
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -r requirements.txt
	@touch $@
	@echo "setup: $(VENV) ready ($$($(BIN)/ansible --version | head -1), $$($(BIN)/python --version))"

lint: venv
	python scripts/license-check.py
	python scripts/doc-lint.py
	antsibull-changelog lint
	python scripts/role-docs.py --check
	python scripts/role_reads.py
	python scripts/run-figures.py --check
	python scripts/bundle-figures.py --check
	yamllint -s .
	ansible-lint
	ruff check .
	ruff format --check .

unit: venv
	bash scripts/pytest-run tests -m "not node"

quick: lint unit

molecule: setup ## every scenario, also after one failed; the failed ones are named at the end
	@failed=(); for s in $(SCENARIOS); do echo "=== molecule scenario $$s ==="; molecule test -s "$$s" || failed+=("$$s"); done; \
	if (( $${#failed[@]} )); then echo "molecule: FAILED scenarios: $${failed[*]}"; exit 1; fi

# Its last line: wall time, CPU-seconds of every process it started (cgroup accounting) and the nodes that went from
# the bare image to the server stage's record, from scripts/accounted (figures also in build/accounted-make-test.json).
test: setup
	@python scripts/accounted make-test $(MAKE) --no-print-directory test-run

test-run:
	@t0=$$SECONDS; \
	$(MAKE) --no-print-directory lint; \
	$(MAKE) --no-print-directory sanity; \
	bash scripts/test-streams; \
	echo "make test: passed in $$((SECONDS - t0)) s (after setup)"

# The scenario that builds four real SGLang trees (main, v0.5.8 patched, v0.5.9, a PR commit) and proves the build
# stage's refusals: 38 min alone here (2026-12-01), so .ci/run runs it after `make test`, not inside it.
TEST_BUILDS_SCENARIOS := build_checks
test-builds: setup
	@t0=$$SECONDS; $(MAKE) --no-print-directory molecule SCENARIOS='$(TEST_BUILDS_SCENARIOS)'; \
	echo "make test-builds: passed in $$((SECONDS - t0)) s (after setup)"

demo: setup
	@bash scripts/demo

demo-down:
	sim/node down demo1 || true
	sim/node teardown

sim-clean:
	sim/node teardown --all

sanity: venv ## ansible-test sanity on the built collection (scripts/ansible-test-sanity)
	@bash scripts/ansible-test-sanity

bench: venv ## prints the figures; exits non-zero when a target is missed
	python tests/bench/bench_readiness.py
	python tests/bench/bench_downloads.py  # downloads (hf_snapshot vs hf download, once per fleet)
	python tests/bench/bench_converged.py  # converged site.yml on 1 and 3 nodes vs ansible -m ping (boots bc1..bc3)

bench-downloads: venv ## the download figures alone (about 4 minutes)
	python tests/bench/bench_downloads.py

# --- facts (issue 24): a converged site.yml on one node and on three, beside `ansible -m ping` of the same hosts ------
# Boots bc1..bc3 (10.213.0.131-133): run it under the node lock, e.g. flock /work/locks/nodes.lock make bench-converged
# Also the last part of `make bench` (which therefore boots nodes too).
.PHONY: bench-converged
bench-converged: venv ## converged re-run figures (about 10-15 minutes: a cold converge of three nodes first)
	python tests/bench/bench_converged.py

# --- day two (issue 28 item 1): build sets side by side, playbooks/upgrade.yml and rollback.yml through the router ---
# The router fleet's module with its build-set tests switched on (LLMOPS_DAYTWO=1): it builds two real SGLang release
# trees (v0.5.8 patched, v0.5.9) and rolls the fleet between them under a client loop. Not in `make test` (the minutes
# it adds are in docs/serving.md). Boots rr1..rr3: run it under the node lock, e.g.
# flock /work/locks/nodes.lock make test-daytwo
.PHONY: core-lines
core-lines: ## ansible-test sanity + unit tests on ansible-core 2.20 and 2.21 (Python 3.12; about 15 minutes here)
	@bash scripts/core-lines

.PHONY: test-daytwo
test-daytwo: venv ## build-set upgrade, fault + automatic rollback, rollback.yml, driver upgrade (node lock)
	LLMOPS_DAYTWO=1 bash scripts/pytest-run -p no:cacheprovider tests/integration/test_router_rolling_on_nodes.py -m node
	LLMOPS_DAYTWO=1 bash scripts/pytest-run -p no:cacheprovider -s tests/integration/test_driver_upgrade_on_nodes.py -m node

# The driver under a serving fleet (issue 28 item 2): du1, du2 (10.213.0.131-132) at 580.95.05 from the driver stage
# behind the router on du3, the last-replica refusal, playbooks/driver_upgrade.yml to 580.105.08 under a client loop
# (one reboot per host), and a re-run that changes nothing. Node lock.
.PHONY: test-driver-upgrade
test-driver-upgrade: venv ## driver upgrade 580.95.05 -> 580.105.08 under a serving fleet (node lock)
	LLMOPS_DAYTWO=1 bash scripts/pytest-run -p no:cacheprovider -s tests/integration/test_driver_upgrade_on_nodes.py -m node

# The same module's model-revision cases alone (issue 28 item 3), without the builds: the fleet comes up, then
# playbooks/model_revision.yml, a faulted revision rolled back, rollback.yml and retention. Node lock.
.PHONY: test-revisions
test-revisions: venv ## model revision switch, fault + rollback, rollback.yml, retention on the router fleet (node lock)
	LLMOPS_DAYTWO=1 bash scripts/pytest-run -p no:cacheprovider tests/integration/test_router_rolling_on_nodes.py -m node \
		-k "come_up_behind_the_router or model_revision"

# --- the example inventory as shipped, end to end: four nodes ex1..ex4 (10.213.0.121-124), site.yml cold to a serving
# fleet behind the router, then the whole site.yml from a second control node with changed=0. Not in `make test`
# (its node stream has no room for four more cold nodes); .ci/run runs it after test-offline. Boots nodes: run it
# under the node lock.
.PHONY: test-example
test-example: venv ## the shipped example inventory on four simulated nodes (under the node lock)
	LLMOPS_EXAMPLE_E2E=1 bash scripts/pytest-run -p no:cacheprovider -s tests/integration/test_example_inventory_on_nodes.py -m node

.PHONY: test-offline
test-offline: venv ## an air-gapped install from an offline bundle on one simulated node (under the node lock)
	LLMOPS_OFFLINE_E2E=1 bash scripts/pytest-run -p no:cacheprovider -s tests/integration/test_offline_bundle_on_node.py -m node

# --- releases (CONTRIBUTING.md, Releases): antsibull-changelog over changelogs/, the execution environment ----------
.PHONY: changelog-lint changelog ee-context
changelog-lint: venv ## the changelog fragments and changelogs/changelog.yaml (also part of make lint)
	antsibull-changelog lint

changelog: venv ## CHANGELOG.md again from changelogs/changelog.yaml (a release: see CONTRIBUTING.md)
	antsibull-changelog generate
	@rm -f changelogs/.plugin-cache.yaml

EE_CONTEXT ?= build/ee
ee-context: venv ## the collection's tarball and ansible-builder's build context for execution-environment.yml
	@rm -rf build/ee-collection && mkdir -p build/ee-collection
	ansible-galaxy collection build --force --output-path build/ee-collection . >/dev/null
	ansible-builder create -f execution-environment.yml -c $(EE_CONTEXT) --output-filename Containerfile
	@echo "ee-context: $(EE_CONTEXT) (build it with: ansible-builder build -f execution-environment.yml -t llmops-sglang-ee)"

lock:
	rm -rf /tmp/llmops-lock && $(PYTHON) -m venv /tmp/llmops-lock && \
	/tmp/llmops-lock/bin/pip install -q $$(sed -n '/^# Top-level/,/^# Their/p' requirements.txt | grep -v '^#') && \
	/tmp/llmops-lock/bin/pip freeze

# The shared-storage tests' root_squash share (sim/share/root_squash.py, FUSE through fusepy).
HOST_PKGS += libfuse2

# --- the fleet report (bin/sglang-report, docs/report.md) -------------------------------------------------------
# Debian's chromium for the report's browser test (tests/browser) and the docs screenshot.
HOST_PKGS += chromium
SGLANG_RELEASES ?= /var/cache/llmops-sglang-releases
.PHONY: report-screenshot fetch-sglang-wheel

report-screenshot: venv ## docs/report-demo.png: the demo's report (saved from a demo run) in headless Chromium
	@rm -rf build/report-demo
	python bin/sglang-report --out build/report-demo tests/fixtures/report/ready.json >/dev/null
	python scripts/headless_chromium.py build/report-demo/index.html --screenshot docs/report-demo.png >/dev/null
	@echo "report-screenshot: docs/report-demo.png"

fetch-sglang-wheel: venv ## the real sglang 0.5.9 wheel (PyPI) that the metric names are checked against
	@mkdir -p $(SGLANG_RELEASES); \
	if ! ls $(SGLANG_RELEASES)/sglang-0.5.9-*.whl >/dev/null 2>&1; then \
	  t=$$(mktemp -d $(SGLANG_RELEASES)/.tmp-report-XXXX); \
	  python -m pip download -q sglang==0.5.9 --no-deps -d "$$t" && mv "$$t"/sglang-0.5.9-*.whl $(SGLANG_RELEASES)/; \
	  rm -rf "$$t"; fi; ls $(SGLANG_RELEASES)/sglang-0.5.9-*.whl

# --- grammar (issue 14): the versions table against every real SGLang release (downloads; not part of make test)
.PHONY: conformance
conformance: venv ## downloads every sglang wheel on the host's package index into /var/cache/llmops-sglang-releases
	python scripts/sglang_conformance.py

# --- grammar (issue 15): doctor throughput on a generated 1 GiB log vs grep -F, peak RSS, a file without newlines
.PHONY: bench-doctor
bench: bench-doctor
bench-doctor: venv
	python tests/bench/bench_doctor.py

# --- bad-input matrix (docs/bad-input.md) ------------------------------------------------------------------
# Count the rows of every tests/*/test_bad_input_*.py, run those that need no node, write the figures section.
.PHONY: bad-input-figures
bad-input-figures: venv
	python scripts/bad-input-figures.py --run --write
# --- gpu-stack: Debian's own PCI id database for the GPU-discovery tests and the simulated mirror ---------------
.PHONY: pci-ids
setup: pci-ids
unit: pci-ids
pci-ids:
	@python3 sim/gpu/pci_ids.py >/dev/null && echo "setup: PCI id database from Debian's pci.ids package cached"
	@python3 -c 'import sys; sys.path.insert(0, "sim/mirrors"); import driver_graph; driver_graph.debian_stanzas()' \
	  && echo "setup: Debian's NVIDIA driver packaging metadata cached"
# --- real toolchains, no GPU (issue 27): Triton, nvcc, CMake, flash-attn's setup.py, torch (docs/builds.md) ---------
# Everything comes from the package registries through pip and is cached in TOOLCHAIN_CACHE. `make test` runs the
# compile proofs (tests/unit/test_toolchain_real.py); toolchain-check adds the real torch wheels (about 5 GB of
# downloads, 7 GB installed the first time): CI runs it once per change of the pins.
export TOOLCHAIN_CACHE ?= /var/cache/llmops-toolchain
.PHONY: toolchain-check toolchain-check-ci
toolchain-check: venv ## sm120 table, fatbinaries per fleet, sgl-kernel's libraries, the real torch check
	cd scripts && ../$(BIN)/python -m toolchain all
toolchain-check-ci: venv ## the same, once per change of the pins (a pass is stamped in TOOLCHAIN_CACHE); .ci/run
	cd scripts && ../$(BIN)/python -m toolchain ci
