# llmops.sglang — every entry point a developer, CI or a user needs.
#   make demo    set up, boot a simulated 8 x RTX PRO 6000 node, run site.yml on it, show the result
#   make test    set up, lint, unit tests, molecule scenarios (what .ci/run runs)
#   make quick   lint + unit tests only (seconds; for iterating)
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

HOST_PKGS := debootstrap systemd-container tinyproxy openssh-client dpkg-dev apt-utils gnupg iproute2 git
SCENARIOS ?= $(patsubst molecule/%/molecule.yml,%,$(wildcard molecule/*/molecule.yml))

docs: venv
	python scripts/role-docs.py

.PHONY: docs help setup host-packages venv lint unit quick molecule test demo demo-down sim-clean sanity lock bench
.PHONY: bench-downloads

help:
	@sed -n '1,5p' Makefile | sed 's/^# \{0,1\}//'
	@echo "Other targets: setup lint unit molecule demo-down sim-clean sanity bench lock"

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
	python scripts/role-docs.py --check
	yamllint -s .
	ansible-lint
	ruff check .
	ruff format --check .

unit: venv
	bash scripts/pytest-run tests -m "not node"

quick: lint unit

molecule: setup
	@for s in $(SCENARIOS); do echo "=== molecule scenario $$s ==="; molecule test -s "$$s" || exit 1; done

test: setup
	@t0=$$SECONDS; \
	$(MAKE) --no-print-directory lint; \
	bash scripts/pytest-run tests; \
	$(MAKE) --no-print-directory molecule; \
	echo "make test: passed in $$((SECONDS - t0)) s (after setup)"

demo: setup
	@bash scripts/demo

demo-down:
	sim/node down demo1 || true
	sim/node teardown

sim-clean:
	sim/node teardown --all

sanity: venv
	@bash scripts/ansible-test-sanity

bench: venv ## prints the figures; exits non-zero when a target is missed
	python tests/bench/bench_readiness.py
	python tests/bench/bench_downloads.py  # downloads (hf_snapshot vs hf download, once per fleet)

bench-downloads: venv ## the download figures alone (about 4 minutes)
	python tests/bench/bench_downloads.py

lock:
	rm -rf /tmp/llmops-lock && $(PYTHON) -m venv /tmp/llmops-lock && \
	/tmp/llmops-lock/bin/pip install -q $$(sed -n '/^# Top-level/,/^# Their/p' requirements.txt | grep -v '^#') && \
	/tmp/llmops-lock/bin/pip freeze
