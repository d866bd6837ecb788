# The two things a user does: bring the lab up, and test the program.
VENV  ?= .venv
PY    := $(VENV)/bin/python
STACK ?= lab
# Pulumi.yaml's backend: local files, no account. The directory must exist before first use.
STATE_DIR := $(HOME)/.pulumi-kamaji-hami-lab

.DEFAULT_GOAL := help
.PHONY: help up preview destroy test test-real test-host lint check capacity up-ready preview-ready destroy-ready mutation \
	kubeconfig sharing outputs-ready stack pulls ledger dashboard

# What each tool is for the targets below, and how to install it. A target that needs tools
# names them with $(call require,...): one line per missing tool, before anything else runs.
# Both messages go to stderr: `eval "$(make -s kubeconfig)"` runs only what the tool prints.
# The Pulumi CLI the lab was run and tested with (preflight/checks.py PULUMI_CLI, the workflows).
PULUMI_CLI := 3.274.1
INSTALL_pulumi  := curl -fsSL https://get.pulumi.com | sh -s -- --version $(PULUMI_CLI)
INSTALL_kind    := go install sigs.k8s.io/kind@v0.33.0, or curl -Lo ./kind https://kind.sigs.k8s.io/dl/v0.33.0/kind-linux-amd64 && chmod +x ./kind && sudo mv ./kind /usr/local/bin/kind
INSTALL_docker  := Docker Engine, rootful: https://docs.docker.com/engine/install/
INSTALL_kubectl := https://kubernetes.io/docs/tasks/tools/install-kubectl-linux/
INSTALL_curl    := e.g. sudo apt-get install curl
INSTALL_git     := e.g. sudo apt-get install git
INSTALL_helm    := Helm 3: https://helm.sh/docs/intro/install/
INSTALL_python3 := Python >= 3.11 with venv, e.g. sudo apt-get install python3 python3-venv
require = @missing=0; $(foreach t,$(1),command -v $(t) >/dev/null 2>&1 || { echo "missing $(t): $(INSTALL_$(t))" >&2; missing=1; };) exit $$missing
need_passphrase = @test -n "$$PULUMI_CONFIG_PASSPHRASE" || { \
	  echo "set PULUMI_CONFIG_PASSPHRASE (it encrypts the stack's secrets)" >&2; exit 1; }

# `make` alone: the targets a user runs, each with what it does (the `## ` text on its rule).
help:
	@echo "kamaji-hami-lab: make <target> [STACK=lab]"
	@awk 'BEGIN {FS = ":.*## "} /^[a-z-]+:.*## / {printf "  %-11s %s\n", $$1, $$2}' $(MAKEFILE_LIST)

$(VENV)/.installed: requirements.txt requirements-dev.txt
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements-dev.txt
	touch $@

up-ready:
	$(call require,pulumi kind docker kubectl curl git helm python3)
	$(need_passphrase)

# State lives in ~/.pulumi-kamaji-hami-lab (Pulumi.yaml's backend); secrets use a passphrase.
# The host preflight runs on every `make up` (the program's own step runs only when what it
# checks changes), against the stack's config and what its last update deployed.
up: up-ready $(VENV)/.installed ## preflight, plan, deploy after you confirm (STACK=lab)
	mkdir -p $(STATE_DIR)
	pulumi stack select --create $(STACK)
	$(PY) -m preflight --stack $(STACK)
	pulumi up --stack $(STACK) $(ARGS)

# The program runs in a preview too: it fetches Kamaji's charts with git and helm, and the
# passphrase opens the stack (creating it on a fresh checkout, as `make up` does).
preview-ready:
	$(call require,pulumi git helm python3)
	$(need_passphrase)

preview: preview-ready $(VENV)/.installed ## the plan only, with its diff
	mkdir -p $(STATE_DIR)
	pulumi stack select --create $(STACK)
	pulumi preview --stack $(STACK) --diff $(ARGS)

destroy-ready:
	$(call require,pulumi)
	$(need_passphrase)

# Also a broken lab: with the kind node down every Kubernetes object is unreachable, and the
# variable (only here, never on `up`) lets the provider drop such objects from state instead of
# failing. The refresh comes first because only Read does that for Helm releases: their Delete
# fails on an unreachable cluster whatever the variable says.
destroy: destroy-ready ## remove the lab, also a broken one
	PULUMI_K8S_DELETE_UNREACHABLE=true pulumi destroy --refresh --stack $(STACK) $(ARGS)

check: outputs-ready $(VENV)/.installed ## validate the running lab (labcheck)
	$(PY) -m labcheck --stack $(STACK)

# What opens the stack: `make stack`, and the stack's outputs (secrets included) that
# `make check`, `capacity`, `kubeconfig` and `sharing` read.
outputs-ready:
	$(call require,pulumi)
	$(need_passphrase)

# Select (or create) the stack, as `make up` does first: `pulumi config set --stack $(STACK)`
# needs the stack, and a fresh checkout has none before its first `make up`.
stack: outputs-ready ## create or select the stack, for pulumi config set before a first up
	mkdir -p $(STATE_DIR)
	pulumi stack select --create $(STACK)

# Each tenant's admin kubeconfig from the stack's outputs, owner-only, in kubeconfigs/<stack>/;
# prints an `export KUBECONFIG=...` line per tenant (TENANT=<name> for one).
kubeconfig: outputs-ready $(VENV)/.installed ## write each tenant's kubeconfig, print its export line (TENANT=)
	@$(PY) -m labcheck.kubeconfigs --stack $(STACK) --dir kubeconfigs/$(STACK) \
	  $(if $(TENANT),--tenant $(TENANT))

# Which pods hold which slices of each tenant's cards now, and its picture
# (reports/<stack>/sharing.png). Read-only: it creates nothing in the lab.
sharing: outputs-ready $(VENV)/.installed ## who holds which GPU slices now, and its picture
	$(PY) -m labcheck.sharing --stack $(STACK) --report-dir reports/$(STACK)

# A capacity run of a workload mix against the running lab (docs/capacity.md).
capacity: outputs-ready $(VENV)/.installed ## place a workload mix and report what it needs (MIX=)
	@test -n "$(MIX)" || { echo "set MIX=<mix file>, e.g. MIX=capacity/mixes/inference-heavy.yaml" >&2; exit 2; }
	$(PY) -m capacity --stack $(STACK) --mix $(MIX) --report-dir reports/$(STACK)/capacity $(ARGS)

# Slice-hours and GPU-hours per tenant, namespace and card from the lab's Prometheus, also of
# pods deleted since (docs/monitoring.md); reports/<stack>/ledger.csv and ledger.json.
SINCE ?= 24h
ledger: outputs-ready $(VENV)/.installed ## slice-hours over time from Prometheus, gone pods too (SINCE=24h)
	$(PY) -m capacity --stack $(STACK) --ledger --last $(SINCE) --report-dir reports/$(STACK)

# Where the sharing dashboard opens (a stack output), and who may do what there. Read from all
# outputs: Pulumi records no output whose value is None, and asking for it by name fails.
dashboard: outputs-ready ## how to open the sharing dashboard (Grafana)
	@url=$$(pulumi stack output --json --stack $(STACK) | python3 -c \
	  'import json, sys; print(json.load(sys.stdin).get("dashboardUrl") or "")') || exit 1; \
	if [ -z "$$url" ] || [ "$$url" = "null" ]; then \
	  echo "stack $(STACK) has no dashboard: monitoring.enabled and monitoring.grafana are off" >&2; exit 1; fi; \
	echo "open $$url (anyone who reaches the lab network may view it)"; \
	echo "to edit, sign in as admin: the password is grafanaAdminPassword, or when unset the chart's:"; \
	echo "  pulumi stack output --show-secrets managementKubeconfig --stack $(STACK) > mgmt.kubeconfig"; \
	echo "  kubectl --kubeconfig mgmt.kubeconfig -n lab-monitoring get secret grafana -o jsonpath='{.data.admin-password}' | base64 -d"

# Every image (one per line) and chart the stack pulls at its pinned versions, from its stack
# file alone: what a mirrored site must hold (docs/mirrored-site.md). ARGS=--charts, --table.
pulls: $(VENV)/.installed ## every image and chart the stack pulls (for a site's mirrors)
	@$(PY) -m planning.pulls Pulumi.$(STACK).yaml $(ARGS)

lint: $(VENV)/.installed
	$(VENV)/bin/ruff check .
	$(VENV)/bin/ruff format --check .

# One pytest worker per core (pytest-xdist): every hermetic test is independent of the others.
test: lint ## the hermetic tests (no Docker, cluster or Pulumi CLI)
	$(PY) -m pytest -n auto

# Against real programs (Pulumi CLI, kube-apiserver, etcd, kwok, ...) built from the Go module
# proxy into ${XDG_CACHE_HOME:-~/.cache}/kamaji-hami-lab/real: cold ~13 min, cached seconds.
test-real: $(VENV)/.installed ## tests against real programs (docs/testing.md)
	$(PY) tests/real/binaries.py
	$(PY) -m pytest tests/real

# Against a real Docker Engine (tests/host): the daemon that answers, or Debian's docker.io
# installed and started by the tier under ${XDG_CACHE_HOME:-~/.cache}/kamaji-hami-lab/host,
# stopped by PID at the end; a kind node image built here (Debian packages, Go modules with the
# real tier's caches). Needs root (apt, dockerd): ~18 min the first time, then ~10 min.
test-host: $(VENV)/.installed ## tests against a real Docker Engine, as root (docs/testing.md)
	$(PY) -m pytest tests/host

# Mutation testing of the core modules ([tool.mutmut] in pyproject.toml) on a fresh copy in
# mutants/; survivors judged equivalent are listed in tests/mutation-survivors.md. One module:
# make mutation MUTANTS='labconfig.model.*'. Too slow for CI on 2 cores (docs/testing.md).
MUTATION_CHILDREN ?= 2
mutation: $(VENV)/.installed
	rm -rf mutants
	$(VENV)/bin/mutmut run --max-children $(MUTATION_CHILDREN) $(MUTANTS)
	$(VENV)/bin/mutmut results
